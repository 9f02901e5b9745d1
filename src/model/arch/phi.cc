// Phi (1/1.5/2): LayerNorm with bias, one norm feeding attention and MLP in parallel,
// partial rotary, biases everywhere including lm_head.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ArchSpec phi_spec() {
  ArchSpec s;
  s.family = "phi";
  s.architectures = {"PhiForCausalLM"};
  s.model_types = {"phi"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.activation = "gelu_new";
    d.partial_rotary_factor = 0.5;
    ModelConfig mc = read_llama_like(cfg, d);
    if (cfg.bool_or({"qk_layernorm"}, false))
      raise<InvalidArgument>("{}: field 'qk_layernorm' = true is not supported", cfg.source());
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"layer_norm_eps"}, 1e-5);
    mc.gated_mlp = false;
    mc.qkv_bias = mc.o_bias = mc.mlp_bias = mc.lm_head_bias = true;
    mc.parallel_residual = true;
    mc.parallel_shared_norm = true;
    return mc;
  };
  s.map_weights = [](const ModelConfig&) {
    const std::string l = "model.layers.{L}.";
    return WeightMap{
        {Slot::kEmbedding, {"model.embed_tokens.weight"}},
        {Slot::kAttnNorm, {l + "input_layernorm.weight"}},
        {Slot::kAttnNormBias, {l + "input_layernorm.bias"}},
        {Slot::kQ, {l + "self_attn.q_proj.weight"}},
        {Slot::kQBias, {l + "self_attn.q_proj.bias"}},
        {Slot::kK, {l + "self_attn.k_proj.weight"}},
        {Slot::kKBias, {l + "self_attn.k_proj.bias"}},
        {Slot::kV, {l + "self_attn.v_proj.weight"}},
        {Slot::kVBias, {l + "self_attn.v_proj.bias"}},
        {Slot::kO, {l + "self_attn.dense.weight"}},
        {Slot::kOBias, {l + "self_attn.dense.bias"}},
        {Slot::kUp, {l + "mlp.fc1.weight"}},
        {Slot::kUpBias, {l + "mlp.fc1.bias"}},
        {Slot::kDown, {l + "mlp.fc2.weight"}},
        {Slot::kDownBias, {l + "mlp.fc2.bias"}},
        {Slot::kFinalNorm, {"model.final_layernorm.weight"}},
        {Slot::kFinalNormBias, {"model.final_layernorm.bias"}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
        {Slot::kLmHeadBias, {"lm_head.bias"}},
    };
  };
  return s;
}

}  // namespace tachyon::arch
