// libFuzzer target: the regex and GBNF parsers, their lowering and the matcher on what
// compiles (build with -DTACHYON_FUZZ=ON and clang; run e.g.
// build-fuzz/tests/grammar_parsers_fuzz tests/grammar/corpus/grammar_parsers); see
// grammar_parsers_fuzz_entry.h.
#include "grammar/grammar_parsers_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::grammar_parsers_one(data, size);
  return 0;
}
