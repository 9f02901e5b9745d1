// libFuzzer target: the image decoders (build with -DTACHYON_FUZZ=ON and clang; run e.g.
// build-fuzz/tests/image_decode_fuzz tests/media/corpus/image_decode); see
// image_decode_fuzz_entry.h.
#include "media/image_decode_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::image_decode_one(data, size);
  return 0;
}
