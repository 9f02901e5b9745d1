// Helpers for the model tests: fixture folders, one-sequence batches, config mapping
// and its refusals.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "conformance/fixture_dir.h"
#include "core/error.h"
#include "core/json.h"
#include "model/forward.h"
#include "model/hf_config.h"
#include "model/registry.h"

namespace tachyon::testing_util {

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

// The next step of one sequence of `tokens`, `computed` of them cached: the rest, in
// cache blocks taken from the top down (cache_blocks - 1, - 2, ...: reverse order, to
// exercise the block table); the logits of its last token.
inline ForwardBatch next_step(const std::vector<int32_t>& tokens, int32_t computed,
                              int32_t block_size, int32_t cache_blocks) {
  ForwardBatch b;
  const int32_t n = static_cast<int32_t>(tokens.size()) - computed;
  for (int32_t i = 0; i < n; ++i) {
    b.token_ids.push_back(tokens[static_cast<size_t>(computed + i)]);
    b.positions.push_back(computed + i);
  }
  b.query_start = {0, n};
  b.context_lens = {computed + n};
  b.max_blocks_per_seq = (computed + n + block_size - 1) / block_size;
  for (int32_t i = 0; i < b.max_blocks_per_seq; ++i) b.block_tables.push_back(cache_blocks - 1 - i);
  b.logits_rows = {n - 1};
  return b;
}

// The ModelConfig a config.json maps to (override_type as --model-type).
inline ModelConfig map(const Json& j, const std::string& override_type = "") {
  return map_model_config(HfConfig(j, "config.json"), override_type);
}

inline WeightMap weights_of(const Json& j, const std::string& override_type = "") {
  HfConfig cfg(j, "config.json");
  return find_arch(cfg, override_type).map_weights(map_model_config(cfg, override_type));
}

// Expects InvalidArgument whose message contains every one of `needles`.
template <typename F>
void expect_invalid(F&& f, std::initializer_list<const char*> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    for (const char* n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

template <typename F>
void expect_invalid(F&& f, const char* needle) {
  expect_invalid(std::forward<F>(f), {needle});
}

}  // namespace tachyon::testing_util
