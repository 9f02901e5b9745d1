// The runner's side of prompt layouts (model/prompt_layout.h): reading a prompt,
// checking each step's layouts, GLM's 2-D rotary positions and the attention prefix
// lengths of a bidirectional context.
#include <string>

#include "core/error.h"
#include "model/model_runner.h"
#include "model/prompt_layout.h"

namespace tachyon {

PromptLayout ModelRunner::prompt_layout(std::span<const int32_t> prompt) const {
  return make_prompt_layout(cfg_, prompt);
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

}  // namespace tachyon
