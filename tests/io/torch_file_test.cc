#include "io/torch_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/json.h"
#include "io/checkpoint.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "io/torch_test_util.h"

namespace tachyon {
namespace {

using testing::expect_error;
using testing::float_bytes;
using testing::state_dict_pickle;
using testing::TempDir;
using testing::TensorSpec;
using testing::torch_zip;
using testing::write_bytes;

std::shared_ptr<TorchFile> parse_zip(const std::string& bytes) {
  auto owner = std::make_shared<std::string>(bytes);
  return TorchFile::parse(reinterpret_cast<const uint8_t*>(owner->data()), owner->size(), owner,
                          "test.bin");
}

std::vector<float> values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kF32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<float> iota(int n, float start = 0) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// The real torch.save output in the gpt2 fixture: names and shapes are checked in
// checkpoint_test; here its values, against the same logits stored as safetensors.
TEST(TorchFile, ReadsTheGpt2FixtureLikeTheSafetensorsCopy) {
  std::string dir = std::string(TACHYON_SOURCE_DIR) + "/tests/conformance/fixtures/gpt2";
  auto bin = TorchFile::open(dir + "/pytorch_model.bin");
  auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  Json expected = load_json_file(dir + "/reference.json").at("checkpoint_tensors");
  EXPECT_EQ(bin->tensors().size(), expected.size());
  int compared = 0;
  for (const auto& e : ref->entries()) {
    Tensor a = bin->get(e.name);
    Tensor b = ref->get(e.name);
    EXPECT_TRUE(testing::same_bytes(a, b)) << e.name;
    ++compared;
  }
  EXPECT_GE(compared, 1);
  Tensor w1 = bin->get("transformer.wte.weight");
  Tensor w2 = bin->get("transformer.wte.weight");
  EXPECT_EQ(w1.raw(), w2.raw());  // a view of the mapped archive
  EXPECT_EQ(w1.shape(), (Shape{512, 64}));
  double sum_sq = 0;
  for (float v : values(w1)) sum_sq += static_cast<double>(v) * v;
  EXPECT_GT(sum_sq, 0.0);  // scaled random weights, not zeros
}

TEST(TorchFile, ReadsTiedStridedAndOffsetTensors) {
  std::vector<TensorSpec> specs = {
      {"a", "FloatStorage", "0", 12, 0, {3, 4}, {4, 1}},
      {"a_tied", "FloatStorage", "0", 12, 0, {3, 4}, {4, 1}},
      {"a_rows", "FloatStorage", "0", 12, 4, {2, 4}, {4, 1}},
      {"a_t", "FloatStorage", "0", 12, 0, {4, 3}, {1, 4}},  // transposed view
      {"a_col", "FloatStorage", "0", 12, 1, {3}, {4}},
      {"scalar", "FloatStorage", "1", 1, 0, {}, {}},
      {"empty", "FloatStorage", "1", 1, 0, {0, 5}, {5, 1}},
      {"ids", "LongStorage", "2", 3, 0, {3}, {1}},
  };
  std::string bytes = torch_zip(
      state_dict_pickle(specs),
      {{"0", float_bytes(iota(12))},
       {"1", float_bytes({7.5f})},
       {"2", testing::le_bytes(5, 8) + testing::le_bytes(-1, 8) + testing::le_bytes(9, 8)}});
  auto f = parse_zip(bytes);
  ASSERT_EQ(f->tensors().size(), specs.size());
  EXPECT_EQ(values(f->get("a")), iota(12));
  EXPECT_EQ(f->get("a").raw(), f->get("a_tied").raw());
  EXPECT_EQ(values(f->get("a_rows")), iota(8, 4));
  EXPECT_EQ(values(f->get("a_t")), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(values(f->get("a_col")), (std::vector<float>{1, 5, 9}));
  EXPECT_EQ(values(f->get("scalar")), (std::vector<float>{7.5f}));
  EXPECT_EQ(f->get("empty").shape(), (Shape{0, 5}));
  Tensor ids = f->get("ids");
  EXPECT_EQ(ids.dtype(), DType::kI64);
  EXPECT_EQ(ids.data<int64_t>()[1], -1);
  EXPECT_EQ(ids.data<int64_t>()[2], 9);
}

TEST(TorchFile, ReadsZip64AndPlainDictArchives) {
  std::vector<TensorSpec> specs = {{"w", "HalfStorage", "0", 4, 0, {2, 2}, {2, 1}}};
  std::string storage = testing::le_bytes(0x3c003c00, 4) + testing::le_bytes(0x40004000, 4);
  auto f = parse_zip(torch_zip(state_dict_pickle(specs, /*ordered_dict=*/false), {{"0", storage}},
                               {.zip64 = true}));
  Tensor w = f->get("w");
  EXPECT_EQ(w.dtype(), DType::kF16);
  EXPECT_EQ(w.to(DType::kF32).data<float>()[0], 1.0f);
  EXPECT_EQ(w.to(DType::kF32).data<float>()[3], 2.0f);
}

TEST(TorchFile, UnalignedStorageIsCopied) {
  std::vector<TensorSpec> specs = {{"w", "FloatStorage", "0", 3, 0, {3}, {1}}};
  auto f =
      parse_zip(torch_zip(state_dict_pickle(specs), {{"0", float_bytes({1, 2, 3})}}, {.align = 1}));
  Tensor w = f->get("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.raw()) % 4, 0u);
  EXPECT_EQ(values(w), (std::vector<float>{1, 2, 3}));
}

TEST(TorchFile, CheckpointOpensBinAndShardedBin) {
  TempDir dir;
  std::vector<TensorSpec> a = {{"x", "FloatStorage", "0", 4, 0, {4}, {1}}};
  std::vector<TensorSpec> b = {{"y", "FloatStorage", "0", 2, 0, {2}, {1}}};
  write_bytes(dir.file("pytorch_model-00001-of-00002.bin"),
              torch_zip(state_dict_pickle(a), {{"0", float_bytes(iota(4))}}));
  write_bytes(dir.file("pytorch_model-00002-of-00002.bin"),
              torch_zip(state_dict_pickle(b), {{"0", float_bytes(iota(2, 10))}}));
  Json index = {
      {"weight_map",
       {{"x", "pytorch_model-00001-of-00002.bin"}, {"y", "pytorch_model-00002-of-00002.bin"}}}};
  write_bytes(dir.file("pytorch_model.bin.index.json"), index.dump());
  auto ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(values(ck->get("y")), iota(2, 10));
  EXPECT_EQ(ck->total_bytes(), 24u);
  std::filesystem::remove(dir.file("pytorch_model-00002-of-00002.bin"));
  expect_error<NotFound>([&] { Checkpoint::open(dir.path()); },
                         {"pytorch_model-00002-of-00002.bin"});
}

TEST(TorchFile, RejectsBadPersistentIds) {
  auto bad = [](const std::string& storage_tuple_body) {
    testing::PickleBuilder p;
    p.proto(2).op('}').op('(').str("w").global("torch._utils", "_rebuild_tensor_v2").op('(');
    p.op('(').raw(storage_tuple_body).op('t').op('Q');
    p.integer(0).int_tuple({1}).int_tuple({1}).op('\x89').op('N').op('t').op('R').op('u').op('.');
    return torch_zip(p.bytes(), {{"0", float_bytes({1})}});
  };
  testing::PickleBuilder ok_cls;
  ok_cls.global("torch", "FloatStorage");
  testing::PickleBuilder s1, s2, s3, s4;
  s1.str("storage").raw(ok_cls.bytes()).str("0").str("cpu");  // numel missing
  expect_error<InvalidArgument>([&] { parse_zip(bad(s1.bytes())); }, {"persistent id"});
  s2.str("module").raw(ok_cls.bytes()).str("0").str("cpu").integer(1);
  expect_error<InvalidArgument>([&] { parse_zip(bad(s2.bytes())); }, {"persistent id"});
  s3.str("storage").str("FloatStorage").str("0").str("cpu").integer(1);
  expect_error<InvalidArgument>([&] { parse_zip(bad(s3.bytes())); }, {"storage class"});
  s4.str("storage").global("torch", "ComplexStorage").str("0").str("cpu").integer(1);
  expect_error<InvalidArgument>([&] { parse_zip(bad(s4.bytes())); }, {"torch.ComplexStorage"});
}

TEST(TorchFile, RejectsStoragesThatDoNotHoldTheTensors) {
  std::vector<TensorSpec> specs = {{"w", "FloatStorage", "7", 4, 0, {4}, {1}}};
  expect_error<InvalidArgument>(
      [&] {
        parse_zip(torch_zip(state_dict_pickle(specs), {{"0", float_bytes(iota(4))}}));
      },
      {"storage '7'", "archive/data/7"});
  expect_error<InvalidArgument>(
      [&] {
        parse_zip(torch_zip(state_dict_pickle(specs), {{"7", float_bytes(iota(3))}}));
      },
      {"storage '7'", "12 bytes"});
  specs = {{"w", "FloatStorage", "0", 4, 1, {4}, {1}}};
  expect_error<InvalidArgument>(
      [&] {
        parse_zip(torch_zip(state_dict_pickle(specs), {{"0", float_bytes(iota(4))}}));
      },
      {"exceeds its storage"});
  specs = {{"w", "FloatStorage", "0", 4, 0, {2, 2}, {4, 1}}};
  expect_error<InvalidArgument>(
      [&] {
        parse_zip(torch_zip(state_dict_pickle(specs), {{"0", float_bytes(iota(4))}}));
      },
      {"exceeds its storage"});
  specs = {{"w", "FloatStorage", "0", 4, 0, {1LL << 62, 1LL << 62}, {0, 0}}};
  expect_error<InvalidArgument>(
      [&] {
        parse_zip(torch_zip(state_dict_pickle(specs), {{"0", float_bytes(iota(4))}}));
      },
      {"overflows"});
}

TEST(TorchFile, RejectsCorruptZip) {
  std::vector<TensorSpec> specs = {{"w", "FloatStorage", "0", 4, 0, {4}, {1}}};
  std::string good = torch_zip(state_dict_pickle(specs), {{"0", float_bytes(iota(4))}});
  ASSERT_NO_THROW(parse_zip(good));
  size_t eocd = good.size() - 22;
  auto patched = [&](size_t at, uint64_t v, int n) {
    std::string s = good;
    s.replace(at, n, testing::le_bytes(v, n));
    return s;
  };
  // Central directory offset past the end, and pointing at garbage.
  expect_error<InvalidArgument>([&] { parse_zip(patched(eocd + 16, good.size() + 100, 4)); },
                                {"central directory"});
  expect_error<InvalidArgument>([&] { parse_zip(patched(eocd + 16, 5, 4)); },
                                {"central directory"});
  // Directory size that runs past the end record.
  expect_error<InvalidArgument>([&] { parse_zip(patched(eocd + 12, 0x7fffffff, 4)); },
                                {"central directory"});
  // An entry count the directory cannot hold.
  expect_error<InvalidArgument>([&] { parse_zip(patched(eocd + 10, 0xfffe, 2)); }, {"entries"});
  // A local header offset pointing outside the archive.
  size_t cd = testing::read_le(good, eocd + 16, 4);
  expect_error<InvalidArgument>([&] { parse_zip(patched(cd + 42, 0x7ffffff0, 4)); },
                                {"local header"});
  // An entry size past the end.
  expect_error<InvalidArgument>([&] { parse_zip(patched(cd + 20, 0x7ffffff0, 4)); },
                                {"runs past the end"});
  expect_error<InvalidArgument>([&] { parse_zip(good.substr(0, good.size() - 1)); },
                                {"not a zip archive"});
  expect_error<InvalidArgument>([&] { parse_zip("PK\x03\x04"); }, {"not a zip archive"});
  expect_error<InvalidArgument>([&] { parse_zip(std::string("\x80\x02}q\x00.", 6)); }, {"legacy"});
  expect_error<InvalidArgument>([&] { parse_zip("hello"); }, {"not a zip"});
}

TEST(TorchFile, RefusesCompressedEntriesClearly) {
  std::vector<TensorSpec> specs = {{"w", "FloatStorage", "0", 1, 0, {1}, {1}}};
  std::string bytes = torch_zip(state_dict_pickle(specs), {{"0", float_bytes({1})}}, {.method = 8});
  expect_error<InvalidArgument>([&] { parse_zip(bytes); }, {"compressed", "method 8"});
}

TEST(TorchFile, RequiresOneDataPickle) {
  expect_error<InvalidArgument>(
      [&] {
        parse_zip(testing::make_zip({{"archive/version", "3"}}));
      },
      {"no data.pkl"});
}

}  // namespace
}  // namespace tachyon
