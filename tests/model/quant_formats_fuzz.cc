// libFuzzer target: quantization_config parsing and the quantized-format readers'
// checks (build with -DTACHYON_FUZZ=ON and clang; run e.g. build-fuzz/tests/quant_formats_fuzz
// tests/model/corpus/quant_formats); see quant_formats_fuzz_entry.h.
#include "model/quant_formats_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::quant_formats_one(data, size);
  return 0;
}
