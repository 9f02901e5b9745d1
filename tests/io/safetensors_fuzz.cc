// libFuzzer target: safetensors parsing (build with -DTACHYON_FUZZ=ON and clang).
#include "io/fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::safetensors_one(data, size);
  return 0;
}
