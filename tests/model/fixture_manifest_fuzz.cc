// libFuzzer target: the conformance fixtures' weights.json manifests (build with
// -DTACHYON_FUZZ=ON and clang; run e.g. build-fuzz/tests/fixture_manifest_fuzz
// tests/model/corpus/fixture_manifest); see fixture_manifest_fuzz_entry.h.
#include "model/fixture_manifest_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::fixture_manifest_one(data, size);
  return 0;
}
