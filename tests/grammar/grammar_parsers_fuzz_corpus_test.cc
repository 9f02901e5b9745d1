// Replays the grammar parsers' fuzz corpus (seeds plus every input a fuzzer once failed
// on) through the fuzz entry point, so builds without libFuzzer run it too.
#include <gtest/gtest.h>

#include "fuzz_replay.h"
#include "grammar/grammar_parsers_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(GrammarParsersFuzzCorpus, ReplaysCleanly) {
  int compiled = 0;
  const int files = testing::for_each_corpus_input(
      "tests/grammar/corpus/grammar_parsers", [&](const std::vector<uint8_t>& d) {
        compiled += fuzz::grammar_parsers_one(d.data(), d.size()) ? 1 : 0;
      });
  EXPECT_GE(files, 12);
  EXPECT_GE(compiled, 6);      // the well-formed seeds compile
  EXPECT_LT(compiled, files);  // and the malformed ones are refused
}

}  // namespace
}  // namespace tachyon
