// The LoRA adapters of a model (multi-LoRA): each registered adapter prepared once as
// its arena row (model/decoder.h LoraArenaShape) in host memory, and the arena on the
// device whose slots hold the adapters resident there. A step's adapters are swapped
// into slots as it needs them (one copy of the row each), the least recently used
// slot no adapter of the step holds giving way.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "model/decoder.h"
#include "model/forward.h"

namespace tachyon {

struct PreparedAdapter {
  // [1, row_elems] in the activation dtype and [1, rank_entries] i32, in the backend's
  // swap memory (Backend::alloc_swap: pinned on a GPU), copied into a slot as a block.
  Tensor row;
  Tensor ranks;
};

class LoraSlots {
 public:
  // An arena of `slots` rows of `shape` on the backend's device, every slot empty.
  LoraSlots(Backend& be, const LoraArenaShape& shape, int32_t slots);

  int32_t num_slots() const { return static_cast<int32_t>(resident_.size()); }
  const LoraArenaShape& shape() const { return shape_; }

  void add(int32_t id, std::shared_ptr<const PreparedAdapter> adapter);
  void remove(int32_t id);
  bool has(int32_t id) const { return adapters_.count(id) > 0; }

  // The slot of each of the step's sequences' adapters into slots (-1 for id 0, the
  // base model), swapping in those not resident. InvalidArgument for an id not
  // registered, or more distinct adapters than slots.
  void assign(std::span<const int32_t> ids, std::vector<int32_t>& slots);

  // The step's LoraStep with row_slots left to the caller.
  LoraStep step() const { return LoraStep{arena_, ranks_, Tensor(), shape_.max_rank}; }
  int64_t swaps() const { return swaps_; }

 private:
  Backend& be_;
  LoraArenaShape shape_;
  Tensor arena_;  // [slots, row_elems]
  Tensor ranks_;  // [slots, rank_entries] i32
  std::map<int32_t, std::shared_ptr<const PreparedAdapter>> adapters_;
  struct Resident {
    int32_t id = 0;  // 0: empty
    uint64_t used = 0;
  };
  std::vector<Resident> resident_;
  uint64_t clock_ = 0;
  int64_t swaps_ = 0;
};

}  // namespace tachyon
