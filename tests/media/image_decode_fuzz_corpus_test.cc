// Replays the image-decoder fuzz corpus (seeds plus every input a fuzzer once failed
// on) through the fuzz entry point, so builds without libFuzzer run it too.
#include <gtest/gtest.h>

#include "fuzz_replay.h"
#include "media/image_decode_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(ImageDecodeFuzzCorpus, ReplaysCleanly) {
  int decoded = 0;
  const int files = testing::for_each_corpus_input(
      "tests/media/corpus/image_decode", [&](const std::vector<uint8_t>& d) {
        decoded += fuzz::image_decode_one(d.data(), d.size()) ? 1 : 0;
      });
  EXPECT_GE(files, 10);
  EXPECT_GE(decoded, 6);      // the well-formed seeds decode
  EXPECT_LT(decoded, files);  // and the malformed ones are refused
}

}  // namespace
}  // namespace tachyon
