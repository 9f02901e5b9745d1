// Falcon: both layouts. The new decoder architecture (40B/180B style) has grouped
// [q x group, k, v] rows per KV head and two parallel norms; the older layout
// (7B / RW) has multi-query or per-head interleaved qkv, one norm feeding attention
// and MLP in parallel (parallel_attn) or a serial block, and rotary or ALiBi.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ArchSpec falcon_spec() {
  ArchSpec s;
  s.family = "falcon";
  s.architectures = {"FalconForCausalLM", "RWForCausalLM"};
  s.model_types = {"falcon", "RefinedWeb", "RefinedWebModel"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc;
    mc.hidden_size = cfg.require_size({"hidden_size", "n_embed"});
    const int64_t heads = cfg.require_size({"num_attention_heads", "n_head"});
    mc.head_num = to_i32(heads, "num_attention_heads");
    mc.size_per_head =
        head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads", {"head_dim"});
    mc.layer_num = to_i32(cfg.require_size({"num_hidden_layers", "n_layer"}), "num_hidden_layers");
    mc.vocab_size = cfg.require_size({"vocab_size"});
    mc.max_seq_len = cfg.size_or({"max_position_embeddings"}, 2048);
    const bool new_arch = cfg.bool_or({"new_decoder_architecture"}, false);
    const bool multi_query = cfg.bool_or({"multi_query"}, true);
    const bool parallel = cfg.bool_or({"parallel_attn"}, true);
    const int64_t kv = cfg.size_or({"num_kv_heads", "n_head_kv"}, heads);
    mc.head_num_kv = to_i32(new_arch ? kv : (multi_query ? 1 : heads), "num_kv_heads");
    mc.inter_size = cfg.size_or({"ffn_hidden_size"}, 4 * mc.hidden_size);
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"layer_norm_epsilon"}, 1e-5);
    mc.activation =
        parse_activation(cfg.get_string({"activation"}).value_or("gelu"), cfg, "activation");
    mc.gated_mlp = false;
    const bool bias = cfg.bool_or({"bias"}, false);
    mc.qkv_bias = mc.o_bias = mc.mlp_bias = bias;
    read_common(cfg, mc, true);
    if (new_arch) {
      const int64_t num_ln = cfg.int_or({"num_ln_in_parallel_attn"}, 2);
      mc.parallel_residual = true;
      mc.parallel_shared_norm = num_ln != 2;
    } else {
      mc.parallel_residual = parallel;
      mc.parallel_shared_norm = parallel;
    }
    if (cfg.bool_or({"alibi"}, false)) {
      mc.position = PositionType::kAlibi;
      mc.alibi_style = AlibiStyle::kBloom;
      mc.alibi_scaled = true;
      mc.alibi_bf16 = true;
    } else {
      mc.position = PositionType::kRotary;
      mc.rope.style = RotaryStyle::kHalf;
      read_rope(cfg, mc, 10000.0, 1.0);
    }
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    const std::string l = "transformer.h.{L}.";
    const bool new_arch = mc.parallel_residual && !mc.parallel_shared_norm;
    WeightTransform qkv_t = WeightTransform::kNone;
    if (mc.head_num_kv == mc.head_num) qkv_t = WeightTransform::kQkvPerHead;
    if (mc.head_num_kv > 1 && mc.head_num_kv < mc.head_num) qkv_t = WeightTransform::kQkvGrouped;
    WeightMap m = {
        {Slot::kEmbedding, {"transformer.word_embeddings.weight"}},
        {Slot::kQkv, {l + "self_attention.query_key_value.weight", qkv_t}},
        {Slot::kO, {l + "self_attention.dense.weight"}},
        {Slot::kUp, {l + "mlp.dense_h_to_4h.weight"}},
        {Slot::kDown, {l + "mlp.dense_4h_to_h.weight"}},
        {Slot::kFinalNorm, {"transformer.ln_f.weight"}},
        {Slot::kFinalNormBias, {"transformer.ln_f.bias"}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
    };
    if (new_arch) {
      m[Slot::kAttnNorm] = {l + "ln_attn.weight"};
      m[Slot::kAttnNormBias] = {l + "ln_attn.bias"};
      m[Slot::kMlpNorm] = {l + "ln_mlp.weight"};
      m[Slot::kMlpNormBias] = {l + "ln_mlp.bias"};
    } else {
      m[Slot::kAttnNorm] = {l + "input_layernorm.weight"};
      m[Slot::kAttnNormBias] = {l + "input_layernorm.bias"};
      if (!mc.parallel_residual) {
        m[Slot::kMlpNorm] = {l + "post_attention_layernorm.weight"};
        m[Slot::kMlpNormBias] = {l + "post_attention_layernorm.bias"};
      }
    }
    if (mc.qkv_bias) {
      m[Slot::kQkvBias] = {l + "self_attention.query_key_value.bias", qkv_t};
      m[Slot::kOBias] = {l + "self_attention.dense.bias"};
      m[Slot::kUpBias] = {l + "mlp.dense_h_to_4h.bias"};
      m[Slot::kDownBias] = {l + "mlp.dense_4h_to_h.bias"};
    }
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
