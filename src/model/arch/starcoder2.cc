// StarCoder2: LayerNorm with bias, a plain GELU MLP with biases, biased attention,
// rotary, optional sliding window.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec starcoder2_spec() {
  ArchSpec s;
  s.family = "starcoder2";
  s.architectures = {"Starcoder2ForCausalLM"};
  s.model_types = {"starcoder2"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.activation = "gelu_pytorch_tanh";
    d.tie_word_embeddings = true;
    d.max_position_embeddings = 4096;
    ModelConfig mc = read_llama_like(cfg, d);
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"norm_epsilon"}, 1e-5);
    mc.gated_mlp = false;
    const bool bias = cfg.bool_or({"use_bias"}, true);
    mc.qkv_bias = mc.o_bias = mc.mlp_bias = bias;
    read_sliding_window(cfg, mc, 0);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    const std::string l = "model.layers.{L}.";
    WeightMap m = {
        {Slot::kEmbedding, {"model.embed_tokens.weight"}},
        {Slot::kAttnNorm, {l + "input_layernorm.weight"}},
        {Slot::kAttnNormBias, {l + "input_layernorm.bias"}},
        {Slot::kQ, {l + "self_attn.q_proj.weight"}},
        {Slot::kK, {l + "self_attn.k_proj.weight"}},
        {Slot::kV, {l + "self_attn.v_proj.weight"}},
        {Slot::kO, {l + "self_attn.o_proj.weight"}},
        {Slot::kMlpNorm, {l + "post_attention_layernorm.weight"}},
        {Slot::kMlpNormBias, {l + "post_attention_layernorm.bias"}},
        {Slot::kUp, {l + "mlp.c_fc.weight"}},
        {Slot::kDown, {l + "mlp.c_proj.weight"}},
        {Slot::kFinalNorm, {"model.norm.weight"}},
        {Slot::kFinalNormBias, {"model.norm.bias"}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
    };
    if (mc.qkv_bias) {
      m[Slot::kQBias] = {l + "self_attn.q_proj.bias"};
      m[Slot::kKBias] = {l + "self_attn.k_proj.bias"};
      m[Slot::kVBias] = {l + "self_attn.v_proj.bias"};
      m[Slot::kOBias] = {l + "self_attn.o_proj.bias"};
      m[Slot::kUpBias] = {l + "mlp.c_fc.bias"};
      m[Slot::kDownBias] = {l + "mlp.c_proj.bias"};
    }
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
