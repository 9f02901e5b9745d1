#include "engine/kv_sizing.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "core/error.h"

namespace tachyon {

int64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

void size_host_kv_cache(EngineConfig* c, const LanguageModel& model, int64_t host_available) {
  if (c->num_kv_blocks > 0) return;
  TACHYON_CHECK(c->block_size > 0, "block_size {}", c->block_size);
  const int64_t per_block = static_cast<int64_t>(model.kv_bytes_per_block(c->block_size));
  if (per_block <= 0) return;
  const int64_t seq_blocks = (int64_t{model.max_seq_len()} + c->block_size - 1) / c->block_size;
  const int64_t full = int64_t{c->max_num_seqs} * seq_blocks * per_block;
  int64_t cap = c->kv_cache_bytes;
  if (cap <= 0) cap = host_available > 0 ? host_available / 5 : int64_t{1} << 30;
  c->kv_cache_bytes = std::max(std::min(cap, full), per_block);
  c->kv_grow_blocks = static_cast<int32_t>(std::min<int64_t>(seq_blocks, 1 << 30));
}

}  // namespace tachyon
