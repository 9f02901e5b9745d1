// The runner's side of prompt layouts (model/prompt_layout.h) and of the step's other
// attention structure: reading a prompt, checking each step's layouts, GLM's 2-D rotary
// positions, the attention prefix lengths of a bidirectional context, and the tree masks
// of speculative tokens.
#include <string>

#include "core/error.h"
#include "model/model_runner.h"
#include "model/prompt_layout.h"
#include "model/rope.h"

namespace tachyon {

PromptLayout ModelRunner::prompt_layout(std::span<const int32_t> prompt) const {
  return make_prompt_layout(cfg_, prompt);
}

LanguageModel::PrefixReuse ModelRunner::prefix_reuse() const {
  if (rope_uses_prompt_length(cfg_.rope)) return PrefixReuse::kSamePromptLength;
  if (rope_length_dependent(cfg_.rope)) return PrefixReuse::kNever;
  return PrefixReuse::kAlways;
}

void ModelRunner::validate_layouts(const ForwardBatch& b) const {
  const int32_t S = b.num_seqs();
  if (b.layouts.empty()) {
    if (cfg_.needs_prompt_layout() && S > 0)
      raise<InvalidArgument>(
          "forward: this model's positions and attention follow each prompt's layout, and the "
          "batch has none (ForwardBatch::layouts: LanguageModel::prompt_layout of each prompt)");
    return;
  }
  if (static_cast<int32_t>(b.layouts.size()) != S)
    raise<InvalidArgument>("forward: {} layouts for {} sequences", b.layouts.size(), S);
  for (int32_t s = 0; s < S; ++s) {
    const PromptLayout& L = b.layouts[s];
    if (L.context_len < 0 || L.context_len > cfg_.max_seq_len || L.mask_position < -1 ||
        L.mask_position >= cfg_.max_seq_len || (cfg_.glm_2d_positions() && L.mask_position < 0))
      raise<InvalidArgument>("forward: sequence {} has layout (context {}, mask position {})", s,
                             L.context_len, L.mask_position);
    if (L.bidirectional && !cfg_.bidirectional_context)
      raise<InvalidArgument>(
          "forward: sequence {} has a bidirectional context, and this model attends causally", s);
    const int32_t ctx = b.context_lens[s];
    const int32_t start = ctx - (b.query_start[s + 1] - b.query_start[s]);
    if (L.bidirectional && start < L.context_len && (start > 0 || ctx < L.context_len))
      raise<InvalidArgument>(
          "forward: sequence {} computes tokens [{}, {}) of its bidirectional context of {} "
          "tokens: the whole context is computed in one step",
          s, start, ctx, L.context_len);
  }
}

void ModelRunner::rotary_positions(const ForwardBatch& b) {
  const size_t T = static_cast<size_t>(b.num_tokens());
  h_pos_.resize(T);
  h_block_.resize(T);
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t) {
      const Position2D p = glm_position(b.layouts[s], b.positions[t]);
      h_pos_[t] = p.position;
      h_block_[t] = p.block;
    }
  }
}

void ModelRunner::stage_prefix_lens(const ForwardBatch& b) {
  in_.meta.prefix_lens = Tensor();
  if (!cfg_.bidirectional_context || b.layouts.empty()) return;
  const int32_t S = b.num_seqs();
  h_prefix_.assign(static_cast<size_t>(S), 0);
  bool inside = false;  // a query before the last context token: attention differs
  for (int32_t s = 0; s < S; ++s) {
    const PromptLayout& L = b.layouts[s];
    if (!L.bidirectional) continue;
    h_prefix_[s] = L.context_len;
    const int32_t start = b.context_lens[s] - (b.query_start[s + 1] - b.query_start[s]);
    inside = inside || start < L.context_len - 1;
  }
  if (!inside) return;
  stage(h_prefix_.data(), {S}, DType::kI32, &in_.meta.prefix_lens);
}

void ModelRunner::validate_tree_masks(const ForwardBatch& b) const {
  if (b.tree_masks.empty()) return;
  const int32_t S = b.num_seqs();
  if (static_cast<int32_t>(b.tree_masks.size()) != S)
    raise<InvalidArgument>("forward: {} tree masks for {} sequences", b.tree_masks.size(), S);
  bool any = false;
  for (int32_t s = 0; s < S; ++s) {
    const std::vector<uint8_t>& m = b.tree_masks[s];
    if (m.empty()) continue;
    any = true;
    const int64_t q = b.query_start[s + 1] - b.query_start[s];
    if (static_cast<int64_t>(m.size()) != q * q)
      raise<InvalidArgument>(
          "forward: sequence {} has a tree mask of {} entries for {} x {} tokens", s, m.size(), q,
          q);
    for (int64_t i = 0; i < q; ++i) {
      if (m[static_cast<size_t>(i * q + i)] == 0)
        raise<InvalidArgument>("forward: sequence {}: tree token {} does not see itself", s, i);
      for (int64_t j = i + 1; j < q; ++j)
        if (m[static_cast<size_t>(i * q + j)] != 0)
          raise<InvalidArgument>("forward: sequence {}: tree token {} sees the later token {}", s,
                                 i, j);
    }
  }
  // (A step inside a bidirectional context has every token of it at once: no tree.)
  if (any && cfg_.bidirectional_context)
    for (int32_t s = 0; s < S && s < static_cast<int32_t>(b.layouts.size()); ++s) {
      const PromptLayout& L = b.layouts[s];
      const int32_t start = b.context_lens[s] - (b.query_start[s + 1] - b.query_start[s]);
      if (L.bidirectional && start < L.context_len - 1)
        raise<InvalidArgument>(
            "forward: a step with tree masks computes sequence {}'s bidirectional context", s);
    }
}

void ModelRunner::stage_tree_masks(const ForwardBatch& b) {
  in_.meta.tree_mask = in_.meta.tree_mask_start = Tensor();
  if (b.tree_masks.empty()) return;
  const int32_t S = b.num_seqs();
  h_tree_start_.assign(static_cast<size_t>(S), -1);
  h_tree_mask_.clear();
  for (int32_t s = 0; s < S; ++s) {
    const std::vector<uint8_t>& m = b.tree_masks[s];
    if (m.empty()) continue;
    const size_t start = h_tree_mask_.size();
    h_tree_start_[s] = static_cast<int32_t>(start);
    h_tree_mask_.resize(start + (m.size() + 31) / 32, 0u);
    for (size_t bit = 0; bit < m.size(); ++bit)
      if (m[bit] != 0) h_tree_mask_[start + bit / 32] |= 1u << (bit % 32);
  }
  if (h_tree_mask_.empty()) return;  // every sequence causal
  stage(h_tree_mask_.data(), {static_cast<int64_t>(h_tree_mask_.size())}, DType::kI32,
        &in_.meta.tree_mask);
  stage(h_tree_start_.data(), {S}, DType::kI32, &in_.meta.tree_mask_start);
}

}  // namespace tachyon
