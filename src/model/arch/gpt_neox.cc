// GPT-NeoX (Pythia, ...): per-head interleaved qkv, partial rotary (rotary_pct),
// parallel (use_parallel_residual) or serial residual, LayerNorm with bias.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec gpt_neox_spec() {
  ArchSpec s;
  s.family = "gpt_neox";
  s.architectures = {"GPTNeoXForCausalLM"};
  s.model_types = {"gpt_neox"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc;
    mc.hidden_size = cfg.require_size({"hidden_size"});
    const int64_t heads = cfg.require_size({"num_attention_heads"});
    mc.head_num = mc.head_num_kv = to_i32(heads, "num_attention_heads");
    mc.size_per_head =
        head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads", {});
    mc.layer_num = to_i32(cfg.require_size({"num_hidden_layers"}), "num_hidden_layers");
    mc.inter_size = cfg.require_size({"intermediate_size"});
    mc.vocab_size = cfg.require_size({"vocab_size"});
    mc.max_seq_len = cfg.size_or({"max_position_embeddings"}, 2048);
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"layer_norm_eps"}, 1e-5);
    mc.activation =
        parse_activation(cfg.get_string({"hidden_act"}).value_or("gelu"), cfg, "hidden_act");
    mc.gated_mlp = false;
    const bool bias = cfg.bool_or({"attention_bias"}, true);
    mc.qkv_bias = mc.o_bias = bias;
    mc.mlp_bias = true;
    mc.parallel_residual = cfg.bool_or({"use_parallel_residual"}, true);
    mc.parallel_shared_norm = false;
    read_common(cfg, mc, false);
    mc.position = PositionType::kRotary;
    mc.rope.style = RotaryStyle::kHalf;
    read_rope(cfg, mc, 10000.0, cfg.double_or({"rotary_pct"}, 0.25),
              {"rope_theta", "rotary_emb_base"});
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = {
        {Slot::kEmbedding, {"gpt_neox.embed_in.weight"}},
        {Slot::kFinalNorm, {"gpt_neox.final_layer_norm.weight"}},
        {Slot::kFinalNormBias, {"gpt_neox.final_layer_norm.bias"}},
        {Slot::kLmHead, {"embed_out.weight", WeightTransform::kNone, true}},
    };
    add_megatron_layer(m, "gpt_neox.layers.{L}.", "attention", mc.qkv_bias);
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
