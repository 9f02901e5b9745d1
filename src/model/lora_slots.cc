#include "model/lora_slots.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

LoraSlots::LoraSlots(Backend& be, const LoraArenaShape& shape, int32_t slots)
    : be_(be), shape_(shape), resident_(static_cast<size_t>(slots)) {
  TACHYON_CHECK(slots > 0 && shape.max_rank > 0 && shape.row_elems > 0 && shape.rank_entries > 0,
                "a LoRA arena of {} slots of {} elements", slots, shape.row_elems);
  arena_ = be_.alloc({slots, shape.row_elems}, be_.activation_dtype());
  be_.fill_zero(arena_);
  ranks_ = be_.alloc({slots, shape.rank_entries}, DType::kI32);
  be_.fill_zero(ranks_);
}

void LoraSlots::add(int32_t id, std::shared_ptr<const PreparedAdapter> adapter) {
  if (id <= 0 || adapters_.count(id) > 0)
    raise<InvalidArgument>("LoRA adapter id {} is not new", id);
  TACHYON_CHECK(adapter != nullptr && adapter->row.numel() == shape_.row_elems &&
                    adapter->row.dtype() == be_.activation_dtype() &&
                    adapter->ranks.numel() == shape_.rank_entries,
                "LoRA adapter {} prepared for another arena", id);
  adapters_.emplace(id, std::move(adapter));
}

void LoraSlots::remove(int32_t id) {
  adapters_.erase(id);
  for (Resident& r : resident_)
    if (r.id == id) r = Resident{};  // the slot's contents are stale; nothing reads them
}

void LoraSlots::assign(std::span<const int32_t> ids, std::vector<int32_t>& slots) {
  slots.assign(ids.size(), -1);
  ++clock_;
  // Resident adapters first (so that a swap never evicts one this step needs).
  std::vector<size_t> missing;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id == 0) continue;
    if (adapters_.count(id) == 0) raise<InvalidArgument>("forward: no adapter {} loaded", id);
    for (size_t s = 0; s < resident_.size(); ++s)
      if (resident_[s].id == id) {
        slots[i] = static_cast<int32_t>(s);
        resident_[s].used = clock_;
      }
    if (slots[i] < 0) missing.push_back(i);
  }
  for (size_t i : missing) {
    const int32_t id = ids[i];
    // An earlier sequence of this step may have brought it in.
    for (size_t s = 0; s < resident_.size() && slots[i] < 0; ++s)
      if (resident_[s].id == id) slots[i] = static_cast<int32_t>(s);
    if (slots[i] >= 0) continue;
    // The least recently used slot that this step does not use.
    size_t best = resident_.size();
    for (size_t s = 0; s < resident_.size(); ++s)
      if (resident_[s].used != clock_ &&
          (best == resident_.size() || resident_[s].used < resident_[best].used))
        best = s;
    if (best == resident_.size())
      raise<InvalidArgument>("forward: the step uses more LoRA adapters than the {} slots",
                             resident_.size());
    const PreparedAdapter& a = *adapters_.at(id);
    const std::vector<std::pair<int32_t, int32_t>> into = {{0, static_cast<int32_t>(best)}};
    be_.copy_blocks_between(a.row, arena_, into);
    be_.copy_blocks_between(a.ranks, ranks_, into);
    resident_[best] = Resident{id, clock_};
    slots[i] = static_cast<int32_t>(best);
    ++swaps_;
  }
}

}  // namespace tachyon
