// Gemma2: Gemma plus pre+post norms around attention and MLP, attention and final
// logit softcapping, query_pre_attn_scalar and a sliding window on alternate layers.
#include <cmath>

#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ModelConfig read_gemma_common(const HfConfig& cfg);

ArchSpec gemma2_spec() {
  ArchSpec s;
  s.family = "gemma2";
  s.architectures = {"Gemma2ForCausalLM"};
  s.model_types = {"gemma2"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc = read_gemma_common(cfg);
    mc.sandwich_norm = true;
    const double scalar = cfg.double_or({"query_pre_attn_scalar"}, 256.0);
    if (!(scalar > 0))
      raise<InvalidArgument>("{}: field 'query_pre_attn_scalar' must be positive", cfg.source());
    mc.attn_scale = 1.0 / std::sqrt(scalar);
    mc.attn_softcap = cfg.double_or({"attn_logit_softcapping"}, 50.0);
    mc.final_softcap = cfg.double_or({"final_logit_softcapping"}, 30.0);
    mc.sliding_window = to_i32(cfg.size_or({"sliding_window"}, 4096), "sliding_window");
    if (!read_layer_types(cfg, mc)) {
      mc.layer_sliding = all_layers(mc, false);
      for (int32_t i = 0; i < mc.layer_num; ++i) mc.layer_sliding[i] = (i + 1) % 2 != 0;
    }
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = llama_weights(mc);
    const std::string l = "model.layers.{L}.";
    m[Slot::kPostAttnNorm] = {l + "post_attention_layernorm.weight"};
    m[Slot::kMlpNorm] = {l + "pre_feedforward_layernorm.weight"};
    m[Slot::kPostMlpNorm] = {l + "post_feedforward_layernorm.weight"};
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
