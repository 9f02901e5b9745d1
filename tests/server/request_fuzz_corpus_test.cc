// Replays the request fuzz corpus (seeds plus every input a fuzzer once failed on)
// through the fuzz entry point, so builds without libFuzzer run it too.
#include <gtest/gtest.h>

#include "fuzz_replay.h"
#include "server/request_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(RequestFuzzCorpus, ReplaysCleanly) {
  int answered = 0;
  const int files = testing::for_each_corpus_input(
      "tests/server/corpus/request", [&](const std::vector<uint8_t>& d) {
        answered += fuzz::request_one(d.data(), d.size()) ? 1 : 0;
      });
  // The valid seeds are answered, the malformed ones refused (a bug aborts the process).
  EXPECT_GE(files, 20);
  EXPECT_GE(answered, 10);
  EXPECT_LT(answered, files);
  set_log_level(LogLevel::kInfo);
}

}  // namespace
}  // namespace tachyon
