// AsyncModel's inbox: where the callers' threads (submit, cancel, adapters) leave work
// for the loop; and the seed mixing both sides use.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "engine/async_model.h"
#include "engine/request_table.h"

namespace tachyon {

// Where submit() and cancel() leave work for the loop.
struct AsyncModel::Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<EngineRequest>> incoming;
  std::vector<int64_t> cancels;
  std::vector<std::pair<int64_t, int32_t>> stops;  // (request, sequence index)
  // Adapters to add to the model (id, adapter; null: remove), in order; and the ids
  // registered, for submit() to check.
  std::vector<std::pair<int32_t, std::shared_ptr<const PreparedAdapter>>> adapter_changes;
  std::set<int32_t> adapters;
  bool stop = false;
  bool closed = false;  // no more submissions (shut down or dead)
};

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace tachyon
