// Replays the jinja fuzz corpus (seeds plus every input a fuzzer once found a bug
// with) through the fuzz entry point, so builds without libFuzzer exercise it too.
#include <gtest/gtest.h>

#include "chat/jinja_fuzz_entry.h"
#include "fuzz_replay.h"

namespace tachyon {
namespace {

TEST(JinjaFuzzCorpus, ReplaysCleanly) {
  int accepted = 0;
  const int files =
      testing::for_each_corpus_input("tests/chat/corpus/jinja", [&](const std::vector<uint8_t>& d) {
        accepted += fuzz::jinja_one(d.data(), d.size()) ? 1 : 0;
      });
  EXPECT_GE(files, 20);
  EXPECT_GE(accepted, 10);     // the real templates among the seeds render
  EXPECT_LT(accepted, files);  // and the hostile ones are refused
}

}  // namespace
}  // namespace tachyon
