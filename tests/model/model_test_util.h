// Helpers for the model tests: fixture folders and one-sequence batches.
#pragma once

#include <string>
#include <vector>

#include "model/forward.h"

namespace tachyon::testing_util {

inline std::string fixture(const char* name) {
  return std::string(TACHYON_SOURCE_DIR) + "/tests/conformance/fixtures/" + name;
}

// One sequence's step: `tokens` after `computed` cached ones, in cache `blocks`; the
// logits of its last token.
inline ForwardBatch one_seq(const std::vector<int32_t>& tokens, int32_t computed,
                            const std::vector<int32_t>& blocks) {
  ForwardBatch b;
  const int32_t n = static_cast<int32_t>(tokens.size());
  b.token_ids = tokens;
  for (int32_t i = 0; i < n; ++i) b.positions.push_back(computed + i);
  b.query_start = {0, n};
  b.context_lens = {computed + n};
  b.block_tables = blocks;
  b.max_blocks_per_seq = static_cast<int32_t>(blocks.size());
  b.logits_rows = {n - 1};
  return b;
}

}  // namespace tachyon::testing_util
