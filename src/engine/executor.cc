#include "engine/executor.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

void build_forward_batch(const SchedulerOutput& plan, const TokenSource& tokens,
                         ForwardBatch* out) {
  // Cleared, not replaced: the engine passes the same batch every step, so its buffers
  // keep their capacity (a fresh block table of ~1,000 sequences is a new mapping and
  // its page faults every step).
  ForwardBatch& b = *out;
  b.token_ids.clear();
  b.positions.clear();
  b.query_start.clear();
  b.context_lens.clear();
  b.block_tables.clear();
  b.prompt_lens.clear();
  b.layouts.clear();
  b.logits_rows.clear();
  b.sampling.rows.clear();
  b.sampling.adjustments.clear();
  b.sampling.adjust_start.clear();
  b.deferred.clear();
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
}

namespace {

std::vector<std::pair<int32_t, int32_t>> block_pairs(const std::vector<BlockCopy>& copies) {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(copies.size());
  for (const auto& c : copies) pairs.emplace_back(c.src, c.dst);
  return pairs;
}

}  // namespace

void ModelExecutor::move_blocks(const SchedulerOutput& plan) {
  if (!plan.swap_out.empty() || !plan.swap_in.empty())
    model_->swap_kv_blocks(block_pairs(plan.swap_out), block_pairs(plan.swap_in));
  if (!plan.copies.empty()) model_->copy_kv_blocks(block_pairs(plan.copies));
}

}  // namespace tachyon
