// libFuzzer target: PEFT LoRA adapters, adapter_config.json and the safetensors header
// (build with -DTACHYON_FUZZ=ON and clang; run e.g. build-fuzz/tests/lora_adapter_fuzz
// tests/model/corpus/lora_adapter); see lora_adapter_fuzz_entry.h.
#include "model/lora_adapter_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::fuzz::lora_adapter_one(data, size);
  return 0;
}
