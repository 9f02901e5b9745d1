#include "engine/executor.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

ForwardBatch build_forward_batch(const SchedulerOutput& plan, const TokenSource& tokens) {
  ForwardBatch b;
  const size_t n = plan.seqs.size();
  b.token_ids.reserve(static_cast<size_t>(plan.num_batched_tokens));
  b.positions.reserve(static_cast<size_t>(plan.num_batched_tokens));
  b.query_start.reserve(n + 1);
  b.context_lens.reserve(n);
  b.query_start.push_back(0);
  int32_t max_blocks = 0;
  for (const auto& s : plan.seqs)
    max_blocks = std::max(max_blocks, static_cast<int32_t>(s.block_table.size()));
  b.max_blocks_per_seq = max_blocks;
  b.block_tables.assign(n * static_cast<size_t>(max_blocks), -1);
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    const std::span<const int32_t> ids = tokens(s.seq_id);
    TACHYON_CHECK_LE(static_cast<size_t>(s.start + s.num_tokens), ids.size());
    for (int32_t p = s.start; p < s.start + s.num_tokens; ++p) {
      b.token_ids.push_back(ids[static_cast<size_t>(p)]);
      b.positions.push_back(p);
    }
    const int32_t end = static_cast<int32_t>(b.token_ids.size());
    b.query_start.push_back(end);
    b.context_lens.push_back(s.start + s.num_tokens);
    b.prompt_lens.push_back(s.prompt_len > 0 ? s.prompt_len : s.start + s.num_tokens);
    b.layouts.push_back(s.layout);
    std::copy(s.block_table.begin(), s.block_table.end(),
              b.block_tables.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(max_blocks)));
    for (int32_t k = s.num_logits; k > 0; --k) b.logits_rows.push_back(end - k);
  }
  return b;
}

ForwardOutput ModelExecutor::execute(const SchedulerOutput& plan, const ForwardBatch& batch) {
  if (!plan.copies.empty()) {
    std::vector<std::pair<int32_t, int32_t>> pairs;
    pairs.reserve(plan.copies.size());
    for (const auto& c : plan.copies) pairs.emplace_back(c.src, c.dst);
    model_->copy_kv_blocks(pairs);
  }
  return model_->forward_sample(batch);
}

}  // namespace tachyon
