// Replays the quantized-format fuzz corpus (seeds plus every input a fuzzer once failed
// on) through the fuzz entry point, so builds without libFuzzer run it too.
#include <gtest/gtest.h>

#include "fuzz_replay.h"
#include "model/quant_formats_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(QuantFormatsFuzzCorpus, ReplaysCleanly) {
  int parsed = 0;
  const int files = testing::for_each_corpus_input(
      "tests/model/corpus/quant_formats", [&](const std::vector<uint8_t>& d) {
        parsed += fuzz::quant_formats_one(d.data(), d.size()) ? 1 : 0;
      });
  EXPECT_GE(files, 8);
  EXPECT_GE(parsed, 5);      // the well-formed seeds parse
  EXPECT_LT(parsed, files);  // and the malformed ones are refused
}

}  // namespace
}  // namespace tachyon
