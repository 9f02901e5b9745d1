// The KV cache's default size in host memory: room for max_num_seqs sequences of the
// model's full context, capped by an explicit byte budget or else by a fifth of the
// memory available, and reserved in chunks that grow on demand (EngineConfig::
// kv_grow_blocks) so that an idle server holds only the first one.
#pragma once

#include <cstdint>

#include "engine/async_model.h"

namespace tachyon {

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
int64_t host_memory_available();

// Fills c->kv_cache_bytes (the limit) and c->kv_grow_blocks (one full-length sequence's
// blocks, or the whole limit if smaller) for a cache in host memory. An explicit
// num_kv_blocks is left alone (the block count decides, reserved at once); an explicit
// kv_cache_bytes is kept as the cap. host_available: bytes of free memory (<= 0:
// unknown, then 1 GiB is the cap).
void size_host_kv_cache(EngineConfig* c, const LanguageModel& model, int64_t host_available);

}  // namespace tachyon
