// ChatGLM-6B's prompt layout and 2-D positions, as its modeling file derives them from
// the prompt (get_masks, get_position_ids, prepare_inputs_for_generation and the
// position update of _update_model_kwargs_for_generation):
//   - context_len is the index of the first <sop> (bos_token_id); the tokens before it
//     attend to one another in both directions, those from it on causally;
//   - the mask position is the index of the first [gMASK] when the prompt has one, else
//     of the first [MASK];
//   - a token at index i has positions (i, 0) inside the context and
//     (mask position, i - context_len + 1) from the <sop> on, generated tokens included
//     (each decoding step copies the last position and adds 1 to the block position).
#pragma once

#include <cstdint>
#include <span>

#include "model/config.h"
#include "model/forward.h"

namespace tachyon {

// The layout of `prompt` under cfg.glm_prompt; the default layout when the model has
// none. Throws InvalidArgument, naming the token ids, for a prompt without <sop> or
// without any mask token (the modeling file fails on those too).
PromptLayout make_prompt_layout(const ModelConfig& cfg, std::span<const int32_t> prompt);

struct Position2D {
  int32_t position = 0;
  int32_t block = 0;
};
// The two rotary positions of the token at `index` of a sequence laid out as `layout`.
inline Position2D glm_position(const PromptLayout& layout, int32_t index) {
  if (index < layout.context_len) return {index, 0};
  return {layout.mask_position, index - layout.context_len + 1};
}

}  // namespace tachyon
