// MPT: ALiBi with MPT's slopes (alibi_bias_max), LayerNorms without bias (no_bias),
// fused Wqkv with optional clip_qkv, GELU MLP, tied embeddings.
#include <cmath>

#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ArchSpec mpt_spec() {
  ArchSpec s;
  s.family = "mpt";
  s.architectures = {"MptForCausalLM", "MPTForCausalLM"};
  s.model_types = {"mpt"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc;
    mc.hidden_size = cfg.require_size({"d_model"});
    const int64_t heads = cfg.require_size({"n_heads"});
    mc.head_num = mc.head_num_kv = to_i32(heads, "n_heads");
    mc.size_per_head = head_dim_of(cfg, mc.hidden_size, heads, "d_model", "n_heads", {});
    mc.layer_num = to_i32(cfg.require_size({"n_layers"}), "n_layers");
    mc.vocab_size = cfg.require_size({"vocab_size"});
    mc.max_seq_len = cfg.size_or({"max_seq_len"}, 2048);
    mc.inter_size = cfg.size_or({"expansion_ratio"}, 4) * mc.hidden_size;
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"layer_norm_epsilon"}, 1e-5);
    mc.activation = Activation::kGelu;
    mc.gated_mlp = false;
    const bool bias = !cfg.bool_or({"no_bias"}, true);
    mc.qkv_bias = mc.o_bias = mc.mlp_bias = bias;
    HfConfig attn = cfg.sub("attn_config");
    if (!attn.bool_or({"alibi"}, true))
      raise<InvalidArgument>(
          "{}: field 'attn_config.alibi' = false is not supported (MPT runs with ALiBi)",
          cfg.source());
    if (attn.bool_or({"qk_ln"}, false))
      raise<InvalidArgument>("{}: field 'attn_config.qk_ln' = true is not supported", cfg.source());
    mc.position = PositionType::kAlibi;
    mc.alibi_style = AlibiStyle::kMpt;
    // transformers builds MPT's ALiBi with its default alibi_bias_max of 8 whatever the
    // config says (the published MPT checkpoints all use 8); its outputs are the reference.
    mc.alibi_bias_max = 8.0;
    mc.clip_qkv = attn.double_or({"clip_qkv"}, 0.0);
    if (auto scale = attn.get_double({"softmax_scale"})) mc.attn_scale = *scale;
    read_common(cfg, mc, true);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    const std::string l = "transformer.blocks.{L}.";
    WeightMap m = {
        {Slot::kEmbedding, {"transformer.wte.weight"}},
        {Slot::kAttnNorm, {l + "norm_1.weight"}},
        {Slot::kAttnNormBias, {l + "norm_1.bias", WeightTransform::kNone, true}},
        {Slot::kQkv, {l + "attn.Wqkv.weight"}},
        {Slot::kO, {l + "attn.out_proj.weight"}},
        {Slot::kMlpNorm, {l + "norm_2.weight"}},
        {Slot::kMlpNormBias, {l + "norm_2.bias", WeightTransform::kNone, true}},
        {Slot::kUp, {l + "ffn.up_proj.weight"}},
        {Slot::kDown, {l + "ffn.down_proj.weight"}},
        {Slot::kFinalNorm, {"transformer.norm_f.weight"}},
        {Slot::kFinalNormBias, {"transformer.norm_f.bias", WeightTransform::kNone, true}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
    };
    if (mc.qkv_bias) {
      m[Slot::kQkvBias] = {l + "attn.Wqkv.bias"};
      m[Slot::kOBias] = {l + "attn.out_proj.bias"};
      m[Slot::kUpBias] = {l + "ffn.up_proj.bias"};
      m[Slot::kDownBias] = {l + "ffn.down_proj.bias"};
    }
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
