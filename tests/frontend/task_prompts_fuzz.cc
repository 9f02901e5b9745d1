// libFuzzer target: task prompt files (build with -DTACHYON_FUZZ=ON and clang); see
// task_prompts_fuzz_entry.h for what counts as a bug.
#include "frontend/task_prompts_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::task_prompts_one(data, size);
  return 0;
}
