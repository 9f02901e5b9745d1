#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/json.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace tachyon {
namespace {

using testing::expect_error;
using testing::random_tensor;
using testing::same_bytes;
using testing::TempDir;
using testing::write_bytes;

void write_index(const std::string& path, const std::map<std::string, std::string>& weight_map) {
  Json j = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_bytes(path, j.dump(2));
}

struct ShardedModel {
  TempDir dir;
  NamedTensors a = {{"x.weight", random_tensor({4, 3}, DType::kF32, 1)},
                    {"x.bias", random_tensor({4}, DType::kBF16, 2)}};
  NamedTensors b = {{"y.weight", random_tensor({2, 2, 2}, DType::kF16, 3)}};
  std::string shard_a = "model-00001-of-00002.safetensors";
  std::string shard_b = "model-00002-of-00002.safetensors";
  ShardedModel() {
    write_safetensors(dir.file(shard_a), a);
    write_safetensors(dir.file(shard_b), b);
  }
  std::map<std::string, std::string> weight_map() const {
    return {{"x.weight", shard_a}, {"x.bias", shard_a}, {"y.weight", shard_b}};
  }
};

TEST(Checkpoint, OpensSingleSafetensors) {
  TempDir dir;
  NamedTensors ts = {{"b", random_tensor({3, 2}, DType::kF32, 5)},
                     {"a", random_tensor({7}, DType::kI64, 6)}};
  write_safetensors(dir.file("model.safetensors"), ts);
  auto ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(ck->contains("a"));
  EXPECT_FALSE(ck->contains("c"));
  EXPECT_EQ(ck->info("b").shape, (Shape{3, 2}));
  EXPECT_EQ(ck->info("a").dtype, DType::kI64);
  EXPECT_EQ(ck->info("a").file, dir.file("model.safetensors"));
  EXPECT_EQ(ck->total_bytes(), 3u * 2 * 4 + 7 * 8);
  for (const auto& [name, t] : ts) EXPECT_TRUE(same_bytes(ck->get(name), t)) << name;
  expect_error<NotFound>([&] { ck->info("missing.w"); }, {"missing.w"});
  expect_error<NotFound>([&] { ck->get("missing.w"); }, {"missing.w"});
  // A path to the file itself works too.
  EXPECT_EQ(Checkpoint::open(dir.file("model.safetensors"))->names().size(), 2u);
}

TEST(Checkpoint, OpensShardedSafetensorsWithIndex) {
  ShardedModel m;
  write_index(m.dir.file("model.safetensors.index.json"), m.weight_map());
  auto ck = Checkpoint::open(m.dir.path());
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"x.bias", "x.weight", "y.weight"}));
  EXPECT_EQ(ck->info("y.weight").file, m.dir.file(m.shard_b));
  for (const auto& [name, t] : m.a) EXPECT_TRUE(same_bytes(ck->get(name), t)) << name;
  for (const auto& [name, t] : m.b) EXPECT_TRUE(same_bytes(ck->get(name), t)) << name;
  EXPECT_EQ(ck->total_bytes(), 4u * 3 * 4 + 4 * 2 + 8 * 2);
}

TEST(Checkpoint, OpensNumberedShardsWithoutIndex) {
  ShardedModel m;
  auto ck = Checkpoint::open(m.dir.path());
  EXPECT_EQ(ck->names().size(), 3u);
  EXPECT_EQ(ck->files().size(), 2u);
  std::filesystem::remove(m.dir.file(m.shard_b));
  expect_error<NotFound>([&] { Checkpoint::open(m.dir.path()); }, {m.shard_b});
}

TEST(Checkpoint, RejectsMissingShard) {
  ShardedModel m;
  write_index(m.dir.file("model.safetensors.index.json"), m.weight_map());
  std::filesystem::remove(m.dir.file(m.shard_b));
  expect_error<NotFound>([&] { Checkpoint::open(m.dir.path()); }, {m.shard_b, "not found"});
}

TEST(Checkpoint, RejectsIndexNamingAMissingTensor) {
  ShardedModel m;
  auto wm = m.weight_map();
  wm["z.weight"] = m.shard_b;
  write_index(m.dir.file("model.safetensors.index.json"), wm);
  expect_error<InvalidArgument>([&] { Checkpoint::open(m.dir.path()); }, {"'z.weight'", m.shard_b});
}

TEST(Checkpoint, RejectsIndexPointingAtTheWrongShard) {
  ShardedModel m;
  auto wm = m.weight_map();
  wm["y.weight"] = m.shard_a;
  write_index(m.dir.file("model.safetensors.index.json"), wm);
  expect_error<InvalidArgument>([&] { Checkpoint::open(m.dir.path()); }, {"'y.weight'", m.shard_a});
}

TEST(Checkpoint, RejectsDuplicateNamesAcrossShards) {
  ShardedModel m;
  write_safetensors(m.dir.file(m.shard_b), {{"y.weight", random_tensor({1}, DType::kF32, 9)},
                                            {"x.bias", random_tensor({1}, DType::kF32, 9)}});
  write_index(m.dir.file("model.safetensors.index.json"), m.weight_map());
  expect_error<InvalidArgument>([&] { Checkpoint::open(m.dir.path()); },
                                {"'x.bias'", m.shard_a, m.shard_b});
}

TEST(Checkpoint, RejectsBadIndex) {
  ShardedModel m;
  std::string index = m.dir.file("model.safetensors.index.json");
  write_index(index, {{"x.weight", "../etc/passwd"}});
  expect_error<InvalidArgument>([&] { Checkpoint::open(m.dir.path()); }, {"../etc/passwd"});
  write_bytes(index, R"({"weight_map": [1]})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(m.dir.path()); }, {"weight_map"});
  write_bytes(index, R"({"weight_map": {"x.weight": 3}})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(m.dir.path()); }, {"x.weight"});
  write_bytes(index, "{");
  expect_error<InvalidArgument>([&] { Checkpoint::open(m.dir.path()); }, {index});
}

TEST(Checkpoint, CorruptFileErrorNamesFileAndTensor) {
  TempDir dir;
  std::string header = R"({"w.q":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  write_bytes(dir.file("model.safetensors"), testing::safetensors_bytes(header, std::string(8, 0)));
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir.path()); },
                                {dir.file("model.safetensors"), "'w.q'"});
}

TEST(Checkpoint, PrefersSafetensorsOverBin) {
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), {{"w", random_tensor({2}, DType::kF32, 1)}});
  write_bytes(dir.file("pytorch_model.bin"), "not a zip");
  auto ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck->files(), (std::vector<std::string>{dir.file("model.safetensors")}));
}

TEST(Checkpoint, NoWeightsIsNotFound) {
  TempDir dir;
  write_bytes(dir.file("config.json"), "{}");
  expect_error<NotFound>([&] { Checkpoint::open(dir.path()); }, {"no weights", dir.path()});
  expect_error<NotFound>([&] { Checkpoint::open(dir.file("nowhere")); }, {"nowhere"});
}

}  // namespace
}  // namespace tachyon
