// The LoRA settings of `tachyon serve` and `tachyon generate` (core/settings_table.cc:
// --lora / --lora-modules / LORA_INFO, --enable-lora, --merge-lora, --max-loras,
// --max-lora-rank, --max-cpu-loras / MAX_LORA_MODEL_SIZE) checked into one description.
#pragma once

#include <cstdint>
#include <vector>

#include "core/settings.h"
#include "frontend/backend.h"

namespace tachyon::cli {

struct LoraOptions {
  // The adapters given at start, in the order given.
  std::vector<AdapterInfo> adapters;
  // Requests may select adapters, and adapters may be loaded while serving (--enable-lora,
  // or any adapter given without --merge-lora).
  bool enabled = false;
  // The one adapter of `adapters` is folded into the weights at load (`enabled` is false).
  bool merge = false;
  int32_t max_loras = 4;        // resident on the device at once
  int32_t max_rank = 16;        // the largest rank an adapter may have
  int32_t max_registered = 64;  // registered at once (at least max_loras)
};

// Throws InvalidArgument naming the setting: an item that is not NAME=DIR nor the JSON
// item {"name": NAME, "path": DIR}, LORA_INFO that is not a JSON object of strings, a
// bad or repeated name, an empty path, --merge-lora without exactly one adapter or with
// --enable-lora, --max-cpu-loras below --max-loras or below the adapters given.
LoraOptions lora_options(const SettingValues& settings);

}  // namespace tachyon::cli
