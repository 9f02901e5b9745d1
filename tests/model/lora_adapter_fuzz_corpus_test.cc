// Replays the LoRA adapter fuzz corpus (seeds plus every input a fuzzer once failed on)
// through the fuzz entry point, so builds without libFuzzer run it too.
#include <gtest/gtest.h>

#include "fuzz_replay.h"
#include "model/lora_adapter_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(LoraAdapterFuzzCorpus, ReplaysCleanly) {
  int loaded = 0;
  const int files = testing::for_each_corpus_input(
      "tests/model/corpus/lora_adapter", [&](const std::vector<uint8_t>& d) {
        loaded += fuzz::lora_adapter_one(d.data(), d.size()) ? 1 : 0;
      });
  EXPECT_GE(files, 10);
  EXPECT_GE(loaded, 3);      // the well-formed seeds load
  EXPECT_LT(loaded, files);  // and the malformed ones are refused
}

}  // namespace
}  // namespace tachyon
