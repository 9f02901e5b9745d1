// Replays the tokenizer fuzz corpus (seeds plus every input a fuzzer once failed on)
// through the fuzz entry point, so builds without libFuzzer run it too (a failed property
// aborts the process).
#include <gtest/gtest.h>

#include "fuzz_replay.h"
#include "tokenizer/tokenizer_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(TokenizerFuzzCorpus, ReplaysCleanly) {
  const size_t count = fuzz::fuzz_tokenizers().size();
  ASSERT_GT(count, 0u);
  const int files =
      testing::for_each_corpus_input("tests/tokenizer/corpus/text", [&](std::vector<uint8_t>& d) {
        // Every input under every tokenizer, whichever its first byte picks.
        for (size_t t = 0; t < count && !d.empty(); ++t) {
          d[0] = static_cast<uint8_t>((d[0] & 0x80) | t);
          fuzz::tokenizer_one(d.data(), d.size());
        }
      });
  EXPECT_GE(files, 10);
}

}  // namespace
}  // namespace tachyon
