#include "io/safetensors.h"

#include <gtest/gtest.h>

#include "core/json.h"
#include "core/mmap.h"
#include "io/io_test_util.h"

namespace tachyon {
namespace {

using testing::expect_error;
using testing::random_tensor;
using testing::safetensors_bytes;
using testing::TempDir;
using testing::write_bytes;

SafetensorsHeader parse(const std::string& bytes) {
  return parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                  "test.safetensors");
}

void expect_invalid(const std::string& bytes, std::initializer_list<std::string> needles) {
  expect_error<InvalidArgument>([&] { parse(bytes); }, needles);
}

std::string one_tensor(const std::string& entry, size_t data_bytes) {
  return safetensors_bytes("{\"w\":" + entry + "}", std::string(data_bytes, '\x01'));
}

TEST(Safetensors, RoundTripsEveryDtypeWithMetadata) {
  TempDir dir;
  const DType dtypes[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                          DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                          DType::kI16,    DType::kI8,     DType::kU8,  DType::kBool};
  NamedTensors tensors;
  uint32_t seed = 1;
  for (DType dt : dtypes) {
    std::string name = std::string("t.") + std::string(dtype_name(dt));
    tensors.emplace_back(name, random_tensor({3, 5, 2}, dt, seed++));
  }
  tensors.emplace_back("empty", Tensor::empty({0, 7}, DType::kF32));
  tensors.emplace_back("scalar", random_tensor({}, DType::kF32, 99));
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "x\"y"}};
  std::string path = dir.file("m.safetensors");
  write_safetensors(path, tensors, meta);

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata(), meta);
  ASSERT_EQ(f->entries().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    Tensor got = f->get(name);
    EXPECT_TRUE(testing::same_bytes(got, t)) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.raw()) % dtype_size(got.dtype()), 0u) << name;
  }
  // The writer packs tensors without gaps and pads the header to 8 bytes.
  uint64_t end = f->entries().front().offset;
  EXPECT_EQ(end % 8, 0u);
  for (const auto& e : f->entries()) {
    EXPECT_EQ(e.offset, end) << e.name;
    end = e.offset + e.nbytes;
  }
  EXPECT_EQ(end, MappedFile::open(path)->size());
}

TEST(Safetensors, TensorsAreViewsThatKeepTheMappingAlive) {
  TempDir dir;
  Tensor w = random_tensor({16, 4}, DType::kF32, 7);
  std::string path = dir.file("a.safetensors");
  write_safetensors(path, {{"w", w}});
  Tensor a, b;
  {
    auto f = SafetensorsFile::open(path);
    a = f->get("w");
    b = f->get("w");
  }
  EXPECT_EQ(a.raw(), b.raw());  // both views of the same mapped bytes
  EXPECT_TRUE(testing::same_bytes(a, w));
  expect_error<NotFound>([&] { SafetensorsFile::open(path)->get("nope"); }, {"nope", path});
}

TEST(Safetensors, WriterIsAtomicAndRejectsDuplicates) {
  TempDir dir;
  std::string path = dir.file("x.safetensors");
  Tensor t = random_tensor({2}, DType::kF32, 3);
  expect_error<InvalidArgument>([&] { write_safetensors(path, {{"a", t}, {"a", t}}); }, {"'a'"});
  EXPECT_FALSE(file_exists(path));
  write_safetensors(path, {{"a", t}});
  write_safetensors(path, {{"b", t}});  // replaces
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->find("a"), nullptr);
  EXPECT_NE(f->find("b"), nullptr);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(Safetensors, UnalignedDataIsCopiedNotMisread) {
  // A header of odd length puts the f32 data at an odd address.
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ((8 + header.size()) % 4 != 0, true);
  float vals[2] = {1.5f, -2.0f};
  std::string bytes = safetensors_bytes(header, std::string(reinterpret_cast<char*>(vals), 8));
  TempDir dir;
  write_bytes(dir.file("u.safetensors"), bytes);
  Tensor t = SafetensorsFile::open(dir.file("u.safetensors"))->get("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 4, 0u);
  EXPECT_EQ(t.data<float>()[0], 1.5f);
  EXPECT_EQ(t.data<float>()[1], -2.0f);
}

TEST(Safetensors, AcceptsPaddedHeaderAndEmptyFile) {
  auto h = parse(safetensors_bytes("{}      ", ""));
  EXPECT_TRUE(h.entries.empty());
  h = parse(one_tensor(R"({"dtype":"I8","shape":[2,3],"data_offsets":[0,6]})", 6));
  ASSERT_EQ(h.entries.size(), 1u);
  EXPECT_EQ(h.entries[0].shape, (Shape{2, 3}));
  EXPECT_EQ(h.entries[0].offset, h.data_start);
}

TEST(Safetensors, RejectsTruncatedFile) {
  expect_invalid("", {"truncated"});
  expect_invalid(std::string("\x10\0\0", 3), {"truncated"});
  std::string good = one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", 16);
  expect_invalid(good.substr(0, good.size() - 1), {"'w'", "outside the data section"});
}

TEST(Safetensors, RejectsHeaderLengthPastEof) {
  expect_invalid(testing::le64(64) + "{}", {"past the end"});
  expect_invalid(testing::le64(~uint64_t{0}) + "{}", {"exceeds the limit"});
}

TEST(Safetensors, RejectsOversizedHeaderLength) {
  expect_invalid(testing::le64(kSafetensorsMaxHeader + 1) + "{}", {"exceeds the limit"});
}

TEST(Safetensors, RejectsNonObjectHeader) {
  expect_invalid(safetensors_bytes("[1,2]", ""), {"not a JSON object"});
  expect_invalid(safetensors_bytes("\"x\"", ""), {"not a JSON object"});
  expect_invalid(safetensors_bytes("{\"w\":", ""), {"invalid safetensors header JSON"});
  expect_invalid(safetensors_bytes("{\"w\":[]}", ""), {"'w'", "must be an object"});
  expect_invalid(safetensors_bytes("{\"a\":[[[[[[[[[[]]]]]]]]]]}", ""), {"nested"});
}

TEST(Safetensors, RejectsHeadersWithTooManyValues) {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,0],\"shape\":[0";
  header.reserve(20 << 20);
  for (size_t i = 0; i < (size_t{9} << 20); ++i) header += ",0";
  header += "]}}";
  expect_invalid(safetensors_bytes(header, ""), {"more than", "values"});
}

TEST(Safetensors, RejectsUnknownDtype) {
  expect_invalid(one_tensor(R"({"dtype":"F128","shape":[1],"data_offsets":[0,16]})", 16),
                 {"'w'", "unknown dtype 'F128'"});
  expect_invalid(one_tensor(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})", 4),
                 {"'w'", "dtype"});
}

TEST(Safetensors, RejectsNegativeOrOverflowingShape) {
  expect_invalid(one_tensor(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", 4),
                 {"'w'", "non-negative"});
  expect_invalid(one_tensor(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", 4),
                 {"'w'", "non-negative"});
  expect_invalid(
      one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", 4),
      {"'w'", "overflows"});
  expect_invalid(
      one_tensor(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})", 4),
      {"'w'", "too large"});
  expect_invalid(
      one_tensor(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4]})", 4),
      {"'w'", "overflows"});
}

TEST(Safetensors, RejectsOffsetsOutsideTheData) {
  expect_invalid(one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})", 4),
                 {"'w'", "outside"});
  expect_invalid(one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})", 8),
                 {"'w'", "outside"});
  expect_invalid(one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", 4),
                 {"'w'", "[begin, end]"});
  expect_invalid(one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", 4),
                 {"'w'", "non-negative"});
  expect_invalid(
      one_tensor(
          R"({"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]})",
          4),
      {"'w'", "outside"});
}

TEST(Safetensors, RejectsSizeMismatch) {
  expect_invalid(one_tensor(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,12]})", 16),
                 {"'w'", "12 bytes", "needs 16"});
  expect_invalid(one_tensor(R"({"dtype":"BF16","shape":[3],"data_offsets":[0,8]})", 8),
                 {"'w'", "needs 6"});
}

TEST(Safetensors, RejectsOverlappingTensors) {
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_invalid(safetensors_bytes(header, std::string(12, 0)), {"'a'", "'b'", "overlap"});
  std::string same = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  expect_invalid(safetensors_bytes(same, std::string(4, 0)), {"overlap"});
}

TEST(Safetensors, RejectsDuplicateNamesAndBadMetadata) {
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_invalid(safetensors_bytes(header, std::string(8, 0)), {"'a'", "twice"});
  expect_invalid(safetensors_bytes(R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "'k'"});
  expect_invalid(safetensors_bytes(R"({"__metadata__":[]})", ""), {"__metadata__"});
}

TEST(Safetensors, OpenNamesThePath) {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  write_bytes(path, "abc");
  expect_error<InvalidArgument>([&] { SafetensorsFile::open(path); }, {path, "truncated"});
  expect_error<NotFound>([&] { SafetensorsFile::open(dir.file("none.safetensors")); },
                         {"none.safetensors"});
}

}  // namespace
}  // namespace tachyon
