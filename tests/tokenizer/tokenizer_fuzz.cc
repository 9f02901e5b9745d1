// libFuzzer target: the tokenizers on arbitrary text and ids (build with -DTACHYON_FUZZ=ON
// and clang); see tokenizer_fuzz_entry.h for the properties checked.
#include "tokenizer/tokenizer_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::tokenizer_one(data, size);
  return 0;
}
