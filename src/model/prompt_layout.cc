#include "model/prompt_layout.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tachyon {
namespace {

int64_t first_index(std::span<const int32_t> prompt, int64_t id) {
  auto it = std::find(prompt.begin(), prompt.end(), id);
  return it == prompt.end() ? -1 : static_cast<int64_t>(it - prompt.begin());
}

}  // namespace

PromptLayout make_prompt_layout(const ModelConfig& cfg, std::span<const int32_t> prompt) {
  PromptLayout out;
  const GlmPromptConfig& g = cfg.glm_prompt;
  if (!g.enabled()) return out;
  const int64_t context = first_index(prompt, g.context_end_token);
  if (context < 0)
    raise<InvalidArgument>(
        "prompt_ids: this model's prompts end their context with token {} (<sop>), and this "
        "prompt has none (its tokenizer appends [gMASK] <sop> when it adds special tokens)",
        g.context_end_token);
  out.context_len = static_cast<int32_t>(context);
  out.bidirectional = cfg.bidirectional_context;
  if (cfg.glm_2d_positions()) {
    int64_t mask = -1;
    for (int64_t id : g.mask_token_ids) {
      mask = first_index(prompt, id);
      if (mask >= 0) break;
    }
    if (mask < 0) {
      std::string ids;
      for (int64_t id : g.mask_token_ids) ids += (ids.empty() ? "" : " or ") + std::to_string(id);
      raise<InvalidArgument>(
          "prompt_ids: this model's prompts need a mask token ({}: [gMASK] / [MASK]), and this "
          "prompt has none",
          ids);
    }
    out.mask_position = static_cast<int32_t>(mask);
  }
  return out;
}

}  // namespace tachyon
