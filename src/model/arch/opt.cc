// OPT: learned positions with an offset of 2, LayerNorm with bias before (or, with
// do_layer_norm_before = false, after) each block, ReLU MLP, biases, and for
// word_embed_proj_dim != hidden_size the project_in / project_out matrices.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ArchSpec opt_spec() {
  ArchSpec s;
  s.family = "opt";
  s.architectures = {"OPTForCausalLM"};
  s.model_types = {"opt"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc;
    mc.hidden_size = cfg.require_size({"hidden_size"});
    const int64_t heads = cfg.require_size({"num_attention_heads"});
    mc.head_num = mc.head_num_kv = to_i32(heads, "num_attention_heads");
    mc.size_per_head =
        head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads", {});
    mc.layer_num = to_i32(cfg.require_size({"num_hidden_layers"}), "num_hidden_layers");
    mc.vocab_size = cfg.require_size({"vocab_size"});
    mc.inter_size = cfg.require_size({"ffn_dim"});
    mc.max_seq_len = cfg.size_or({"max_position_embeddings"}, 2048);
    const int64_t proj = cfg.size_or({"word_embed_proj_dim"}, mc.hidden_size);
    mc.word_embed_proj_dim = proj != mc.hidden_size ? proj : 0;
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = 1e-5;
    if (!cfg.bool_or({"layer_norm_elementwise_affine"}, true))
      raise<InvalidArgument>("{}: field 'layer_norm_elementwise_affine' = false is not supported",
                             cfg.source());
    const bool before = cfg.bool_or({"do_layer_norm_before"}, true);
    mc.post_norm = !before;
    mc.final_norm = before && !cfg.bool_or({"_remove_final_layer_norm"}, false);
    mc.activation = parse_activation(cfg.get_string({"activation_function"}).value_or("relu"), cfg,
                                     "activation_function");
    mc.gated_mlp = false;
    const bool bias = cfg.bool_or({"enable_bias"}, true);
    mc.qkv_bias = mc.o_bias = mc.mlp_bias = bias;
    mc.position = PositionType::kLearned;
    mc.learned_pos_offset = 2;
    read_common(cfg, mc, true);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    const std::string p = "model.decoder.";
    const std::string l = p + "layers.{L}.";
    WeightMap m = {
        {Slot::kEmbedding, {p + "embed_tokens.weight"}},
        {Slot::kPosEmbedding, {p + "embed_positions.weight"}},
        {Slot::kAttnNorm, {l + "self_attn_layer_norm.weight"}},
        {Slot::kAttnNormBias, {l + "self_attn_layer_norm.bias"}},
        {Slot::kQ, {l + "self_attn.q_proj.weight"}},
        {Slot::kK, {l + "self_attn.k_proj.weight"}},
        {Slot::kV, {l + "self_attn.v_proj.weight"}},
        {Slot::kO, {l + "self_attn.out_proj.weight"}},
        {Slot::kMlpNorm, {l + "final_layer_norm.weight"}},
        {Slot::kMlpNormBias, {l + "final_layer_norm.bias"}},
        {Slot::kUp, {l + "fc1.weight"}},
        {Slot::kDown, {l + "fc2.weight"}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
    };
    if (mc.qkv_bias) {
      m[Slot::kQBias] = {l + "self_attn.q_proj.bias"};
      m[Slot::kKBias] = {l + "self_attn.k_proj.bias"};
      m[Slot::kVBias] = {l + "self_attn.v_proj.bias"};
      m[Slot::kOBias] = {l + "self_attn.out_proj.bias"};
      m[Slot::kUpBias] = {l + "fc1.bias"};
      m[Slot::kDownBias] = {l + "fc2.bias"};
    }
    if (mc.final_norm) {
      m[Slot::kFinalNorm] = {p + "final_layer_norm.weight"};
      m[Slot::kFinalNormBias] = {p + "final_layer_norm.bias"};
    }
    if (mc.word_embed_proj_dim > 0) {
      m[Slot::kProjectIn] = {p + "project_in.weight"};
      m[Slot::kProjectOut] = {p + "project_out.weight"};
    }
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
