// Sequences fed to a model one step at a time, for the GPU tests that drive the decoder
// directly (graphs, overlapped steps): each owns a run of cache blocks, its tokens, and
// how many of them the cache holds.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward.h"

namespace tachyon::cuda_test {

struct StepSeq {
  int32_t slot = 0;  // which run of blocks it owns
  std::vector<int32_t> tokens;
  int32_t computed = 0;
};

// One step advancing each sequence over all its not-yet-computed tokens, logits at each
// one's last. Its block table holds blocks_each entries, entry i block(slot, i).
template <typename BlockFn>
ForwardBatch step_batch(const std::vector<StepSeq*>& seqs, int32_t blocks_each, BlockFn block) {
  ForwardBatch b;
  b.query_start = {0};
  b.max_blocks_per_seq = blocks_each;
  for (const StepSeq* s : seqs) {
    const int32_t n = static_cast<int32_t>(s->tokens.size()) - s->computed;
    for (int32_t i = 0; i < n; ++i) {
      b.token_ids.push_back(s->tokens[s->computed + i]);
      b.positions.push_back(s->computed + i);
    }
    b.query_start.push_back(b.query_start.back() + n);
    b.context_lens.push_back(static_cast<int32_t>(s->tokens.size()));
    b.logits_rows.push_back(b.query_start.back() - 1);
    for (int32_t i = 0; i < blocks_each; ++i) b.block_tables.push_back(block(s->slot, i));
  }
  return b;
}

}  // namespace tachyon::cuda_test
