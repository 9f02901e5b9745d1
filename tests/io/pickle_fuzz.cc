// libFuzzer target: PyTorch checkpoints, as a zip or as a bare data.pkl, read as a state
// dict and as any object (build with -DTACHYON_FUZZ=ON and clang).
#include "io/fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::pickle_one(data, size);
  tachyon::fuzz::pickle_object_one(data, size);
  return 0;
}
