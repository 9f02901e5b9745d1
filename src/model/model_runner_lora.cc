// The runner's LoRA adapters: the arena planned by the decoder, adapters prepared as
// arena rows, and each step's adapters swapped into slots and staged per token.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/lora_adapter.h"
#include "model/model_runner.h"

namespace tachyon {

std::shared_ptr<const PreparedAdapter> Model::prepare_adapter(const LoraAdapter& adapter) const {
  (void)adapter;
  raise<InvalidArgument>("this model has no room for LoRA adapters");
}

void ModelRunner::enable_lora(int32_t max_loras, int32_t max_rank) {
  if (max_loras <= 0 || max_rank <= 0)
    raise<InvalidArgument>("LoRA: {} adapters of rank up to {}", max_loras, max_rank);
  TACHYON_CHECK(!lora_ && kv_.empty(), "enable_lora once, before the KV cache");
  // The arena's capacity: the rank rounded up to a multiple of 8 (the kernels' vector
  // width; the rows past an adapter's rank are zeros). The GPU kernels hold B's rows of
  // at most 64 in registers.
  const int32_t capacity = (max_rank + 7) / 8 * 8;
  if (!be_->device().is_cpu() && capacity > kMaxGpuLoraRank)
    raise<InvalidArgument>("LoRA: a rank of {} is past the {} the GPU takes (--max-lora-rank)",
                           max_rank, kMaxGpuLoraRank);
  const LoraArenaShape shape = decoder_.plan_lora(capacity);
  if (shape.rank_entries == 0)
    raise<InvalidArgument>("LoRA: the model has no product an adapter can target");
  lora_ = std::make_unique<LoraSlots>(*be_, shape, max_loras);
  lora_max_rank_ = max_rank;
  graphs_.clear();
}

std::shared_ptr<const PreparedAdapter> ModelRunner::prepare_adapter(
    const LoraAdapter& adapter) const {
  if (!lora_) raise<InvalidArgument>("this model was loaded without room for LoRA adapters");
  for (const LoraModule& m : adapter.modules)
    if (m.rank() > lora_max_rank_)
      raise<InvalidArgument>("LoRA module {}: rank {} past the largest the server takes ({})",
                             m.name, m.rank(), lora_max_rank_);
  const LoraArenaShape& shape = lora_->shape();
  std::vector<float> row(static_cast<size_t>(shape.row_elems));
  std::vector<int32_t> ranks(static_cast<size_t>(shape.rank_entries));
  decoder_.pack_lora(adapter, row, ranks);
  auto out = std::make_shared<PreparedAdapter>();
  const DType dt = be_->activation_dtype();
  out->row = be_->alloc_swap({1, shape.row_elems}, dt);
  out->ranks = be_->alloc_swap({1, shape.rank_entries}, DType::kI32);
  std::copy(ranks.begin(), ranks.end(), out->ranks.data<int32_t>());
  // The row in the activation dtype (Tensor::to rounds f32 to bf16 or f16).
  const Tensor converted =
      Tensor::wrap(row.data(), {1, shape.row_elems}, DType::kF32, nullptr).to(dt);
  std::memcpy(out->row.raw(), converted.raw(), converted.nbytes());
  return out;
}

void ModelRunner::add_adapter(int32_t id, std::shared_ptr<const PreparedAdapter> adapter) {
  if (!lora_) raise<InvalidArgument>("add_adapter {}: no room for LoRA adapters", id);
  lora_->add(id, std::move(adapter));
}

void ModelRunner::remove_adapter(int32_t id) {
  if (lora_) lora_->remove(id);
}

void ModelRunner::stage_lora(const ForwardBatch& b) {
  in_.lora = LoraStep{};
  const bool any =
      std::any_of(b.adapter_ids.begin(), b.adapter_ids.end(), [](int32_t id) { return id != 0; });
  if (!any) return;
  lora_->assign(b.adapter_ids, h_lora_slots_);
  const int32_t S = b.num_seqs();
  h_lora_rows_.resize(static_cast<size_t>(b.num_tokens()));
  for (int32_t s = 0; s < S; ++s)
    std::fill(h_lora_rows_.begin() + b.query_start[s], h_lora_rows_.begin() + b.query_start[s + 1],
              h_lora_slots_[static_cast<size_t>(s)]);
  in_.lora = lora_->step();
  stage(h_lora_rows_.data(), {b.num_tokens()}, DType::kI32, &in_.lora.row_slots);
}

}  // namespace tachyon
