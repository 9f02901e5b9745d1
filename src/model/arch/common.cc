#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ModelConfig read_llama_like(const HfConfig& cfg, const LlamaLikeDefaults& d) {
  ModelConfig mc;
  mc.hidden_size = cfg.require_size({"hidden_size"});
  const int64_t heads = cfg.require_size({"num_attention_heads"});
  mc.head_num = to_i32(heads, "num_attention_heads");
  mc.head_num_kv = to_i32(cfg.size_or({"num_key_value_heads"}, heads), "num_key_value_heads");
  if (d.head_dim > 0 && !cfg.has({"head_dim"})) {
    mc.size_per_head = to_i32(d.head_dim, "head_dim");
  } else {
    mc.size_per_head =
        head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads");
  }
  mc.layer_num = to_i32(cfg.require_size({"num_hidden_layers"}), "num_hidden_layers");
  mc.inter_size = cfg.require_size({"intermediate_size"});
  mc.vocab_size = cfg.require_size({"vocab_size"});
  mc.max_seq_len = cfg.size_or({"max_position_embeddings"}, d.max_position_embeddings);
  mc.norm_type = NormType::kRMSNorm;
  mc.norm_eps = cfg.double_or({"rms_norm_eps"}, d.norm_eps);
  mc.activation =
      parse_activation(cfg.get_string({"hidden_act"}).value_or(d.activation), cfg, "hidden_act");
  mc.gated_mlp = true;
  const bool attn_bias = cfg.bool_or({"attention_bias"}, d.attention_bias);
  mc.qkv_bias = attn_bias;
  mc.o_bias = attn_bias;
  mc.mlp_bias = cfg.bool_or({"mlp_bias"}, false);
  read_common(cfg, mc, d.tie_word_embeddings);
  mc.position = PositionType::kRotary;
  mc.rope.style = RotaryStyle::kHalf;
  read_rope(cfg, mc, d.rope_theta, d.partial_rotary_factor);
  return mc;
}

void read_sliding_window(const HfConfig& cfg, ModelConfig& mc, int64_t default_window) {
  int64_t w = default_window;
  if (const Json* v =
          cfg.json().contains("sliding_window") ? &cfg.json()["sliding_window"] : nullptr) {
    w = v->is_null() ? 0 : cfg.require_size({"sliding_window"});
  }
  mc.sliding_window = to_i32(w, "sliding_window");
  read_layer_types(cfg, mc);
}

void read_qwen_sliding(const HfConfig& cfg, ModelConfig& mc) {
  const bool use = cfg.bool_or({"use_sliding_window"}, false);
  int64_t window = 0;
  if (use && cfg.has({"sliding_window"})) window = cfg.require_size({"sliding_window"});
  if (use && !cfg.has({"sliding_window"})) window = 4096;
  mc.sliding_window = to_i32(window, "sliding_window");
  if (!read_layer_types(cfg, mc) && window > 0) {
    const int64_t first = cfg.int_or({"max_window_layers"}, 28);
    mc.layer_sliding = all_layers(mc, false);
    for (int32_t i = 0; i < mc.layer_num; ++i) mc.layer_sliding[i] = i >= first ? 1 : 0;
  }
}

void add_megatron_layer(WeightMap& m, const std::string& l, const std::string& attention,
                        bool attention_bias) {
  const auto per_head = WeightTransform::kQkvPerHead;
  const std::string a = l + attention + ".";
  m[Slot::kAttnNorm] = {l + "input_layernorm.weight"};
  m[Slot::kAttnNormBias] = {l + "input_layernorm.bias"};
  m[Slot::kQkv] = {a + "query_key_value.weight", per_head};
  m[Slot::kO] = {a + "dense.weight"};
  m[Slot::kMlpNorm] = {l + "post_attention_layernorm.weight"};
  m[Slot::kMlpNormBias] = {l + "post_attention_layernorm.bias"};
  m[Slot::kUp] = {l + "mlp.dense_h_to_4h.weight"};
  m[Slot::kUpBias] = {l + "mlp.dense_h_to_4h.bias"};
  m[Slot::kDown] = {l + "mlp.dense_4h_to_h.weight"};
  m[Slot::kDownBias] = {l + "mlp.dense_4h_to_h.bias"};
  if (attention_bias) {
    m[Slot::kQkvBias] = {a + "query_key_value.bias", per_head};
    m[Slot::kOBias] = {a + "dense.bias"};
  }
}

WeightMap llama_weights(const ModelConfig& mc, const std::string& p) {
  const std::string l = p + "layers.{L}.";
  WeightMap m = {
      {Slot::kEmbedding, {p + "embed_tokens.weight"}},
      {Slot::kAttnNorm, {l + "input_layernorm.weight"}},
      {Slot::kQ, {l + "self_attn.q_proj.weight"}},
      {Slot::kK, {l + "self_attn.k_proj.weight"}},
      {Slot::kV, {l + "self_attn.v_proj.weight"}},
      {Slot::kO, {l + "self_attn.o_proj.weight"}},
      {Slot::kMlpNorm, {l + "post_attention_layernorm.weight"}},
      {Slot::kGate, {l + "mlp.gate_proj.weight"}},
      {Slot::kUp, {l + "mlp.up_proj.weight"}},
      {Slot::kDown, {l + "mlp.down_proj.weight"}},
      {Slot::kFinalNorm, {p + "norm.weight"}},
      {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
  };
  if (mc.qkv_bias) {
    m[Slot::kQBias] = {l + "self_attn.q_proj.bias"};
    m[Slot::kKBias] = {l + "self_attn.k_proj.bias"};
    m[Slot::kVBias] = {l + "self_attn.v_proj.bias"};
  }
  if (mc.o_bias) m[Slot::kOBias] = {l + "self_attn.o_proj.bias"};
  if (mc.mlp_bias) {
    m[Slot::kGateBias] = {l + "mlp.gate_proj.bias"};
    m[Slot::kUpBias] = {l + "mlp.up_proj.bias"};
    m[Slot::kDownBias] = {l + "mlp.down_proj.bias"};
  }
  return m;
}

}  // namespace tachyon::arch
