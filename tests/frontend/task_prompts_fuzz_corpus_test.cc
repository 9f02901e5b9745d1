// Replays the task prompt fuzz corpus (seeds plus every input a fuzzer once failed on)
// through the fuzz entry point, so builds without libFuzzer run it too.
#include <gtest/gtest.h>

#include "frontend/task_prompts_fuzz_entry.h"
#include "fuzz_replay.h"

namespace tachyon {
namespace {

TEST(TaskPromptsFuzzCorpus, ReplaysCleanly) {
  int accepted = 0;
  const int files = testing::for_each_corpus_input(
      "tests/frontend/corpus/task_prompts", [&](const std::vector<uint8_t>& d) {
        accepted += fuzz::task_prompts_one(d.data(), d.size()) ? 1 : 0;
      });
  // The valid seeds are accepted, the malformed ones refused (a bug aborts the process).
  EXPECT_GE(files, 10);
  EXPECT_GE(accepted, 3);
  EXPECT_LT(accepted, files);
  set_log_level(LogLevel::kInfo);
}

}  // namespace
}  // namespace tachyon
