// libFuzzer target: HTTP requests through the application (build with -DTACHYON_FUZZ=ON and
// clang); see request_fuzz_entry.h for what counts as a bug.
#include "server/request_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::request_one(data, size);
  return 0;
}
