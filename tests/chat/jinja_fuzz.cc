// libFuzzer target: template parsing and rendering (build with -DTACHYON_FUZZ=ON and
// clang; run e.g. build-fuzz/tests/jinja_fuzz tests/chat/corpus/jinja
// tests/chat/templates).
#include "chat/jinja_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::jinja_one(data, size);
  return 0;
}
