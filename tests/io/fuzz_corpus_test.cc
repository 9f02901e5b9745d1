// Replays the fuzz corpora (seeds plus every input a fuzzer once crashed on) through
// the fuzz entry points, so builds without libFuzzer exercise them too.
#include <gtest/gtest.h>

#include "fuzz_replay.h"
#include "io/fuzz_entries.h"

namespace tachyon {
namespace {

struct Replay {
  int files = 0;
  int accepted = 0;
};

template <typename F>
Replay replay(const std::string& corpus, F&& entry) {
  Replay r;
  r.files = testing::for_each_corpus_input(
      "tests/io/corpus/" + corpus,
      [&](const std::vector<uint8_t>& d) { r.accepted += entry(d.data(), d.size()) ? 1 : 0; });
  return r;
}

TEST(FuzzCorpus, SafetensorsReplaysCleanly) {
  Replay r = replay("safetensors", fuzz::safetensors_one);
  EXPECT_GE(r.files, 5);
  EXPECT_GE(r.accepted, 4);  // the valid seeds still load
  EXPECT_LT(r.accepted, r.files);
  set_log_level(LogLevel::kInfo);
}

TEST(FuzzCorpus, PickleReplaysCleanly) {
  Replay r = replay("pickle", fuzz::pickle_one);
  EXPECT_GE(r.files, 6);
  EXPECT_GE(r.accepted, 5);
  EXPECT_LT(r.accepted, r.files);
  set_log_level(LogLevel::kInfo);
}

TEST(FuzzCorpus, PickleReplaysCleanlyAsObjects) {
  // Training checkpoints (Megatron-LM shards), calls of unknown globals kept opaque.
  Replay r = replay("pickle", fuzz::pickle_object_one);
  EXPECT_GE(r.files, 10);
  EXPECT_GE(r.accepted, 9);  // all but the list that contains itself
  EXPECT_LT(r.accepted, r.files);
  set_log_level(LogLevel::kInfo);
}

}  // namespace
}  // namespace tachyon
