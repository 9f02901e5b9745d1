// ChatGLM2, ChatGLM3 and GLM-4 as published with their own modeling code
// (architectures ChatGLMModel, model_type "chatglm"): RMSNorm (or LayerNorm when
// rmsnorm is false), multi-query groups (multi_query_group_num key/value heads), fused
// query_key_value with bias (add_qkv_bias), rotary on the first half of each head with
// interleaved pairs and base 10000 * rope_ratio, a fused SwiGLU dense_h_to_4h
// ([gate; up] rows), output_layer as the lm_head. Config fields: num_layers,
// kv_channels (head size), ffn_hidden_size, padded_vocab_size, seq_length.
//
// The first ChatGLM-6B has the same architectures and model_type; chatglm6b.cc maps it.
//
// ChatGLM2-6B-32k's modeling file reads rope_ratio differently (positions divided by
// it, a linear interpolation); its config cannot be told apart, so it is reached by
// name: --model-type chatglm2.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

void refuse_chatglm_extras(const HfConfig& cfg) {
  if (cfg.has({"pre_seq_len"}))
    raise<InvalidArgument>("{}: P-tuning prefixes (field 'pre_seq_len') are not supported",
                           cfg.source());
  if (cfg.int_or({"quantization_bit"}, 0) != 0)
    raise<InvalidArgument>(
        "{}: field 'quantization_bit' = {}: the modeling file's own quantized weights are not "
        "supported",
        cfg.source(), cfg.int_or({"quantization_bit"}, 0));
}

namespace {

ModelConfig map_chatglm(const HfConfig& cfg, bool rope_ratio_interpolates) {
  // (A ChatGLM-6B config reaches the chatglm entry's variant, never this mapping, unless
  // named as chatglm2.)
  if (is_chatglm6b_config(cfg))
    raise<InvalidArgument>(
        "{}: a ChatGLM-6B config (fields 'position_encoding_2d' / 'inner_hidden_size') is not "
        "ChatGLM2-6B-32k's: load it without --model-type chatglm2",
        cfg.source());
  if (cfg.bool_or({"apply_residual_connection_post_layernorm"}, false))
    raise<InvalidArgument>(
        "{}: field 'apply_residual_connection_post_layernorm' = true is not supported",
        cfg.source());
  refuse_chatglm_extras(cfg);
  const bool bias_linear = cfg.bool_or({"add_bias_linear"}, false);
  if (bias_linear)
    raise<InvalidArgument>("{}: field 'add_bias_linear' = true is not supported", cfg.source());

  ModelConfig mc;
  mc.hidden_size = cfg.require_size({"hidden_size"});
  const int64_t heads = cfg.require_size({"num_attention_heads"});
  mc.head_num = to_i32(heads, "num_attention_heads");
  mc.size_per_head = head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads",
                                 {"kv_channels"});
  const bool multi_query = cfg.bool_or({"multi_query_attention"}, false);
  mc.head_num_kv =
      multi_query ? to_i32(cfg.require_size({"multi_query_group_num"}), "multi_query_group_num")
                  : mc.head_num;
  mc.layer_num = to_i32(cfg.require_size({"num_layers"}), "num_layers");
  mc.inter_size = cfg.require_size({"ffn_hidden_size"});
  mc.vocab_size = cfg.require_size({"padded_vocab_size", "vocab_size"});
  mc.max_seq_len = cfg.size_or({"seq_length"}, 2048);
  mc.norm_type = cfg.bool_or({"rmsnorm"}, true) ? NormType::kRMSNorm : NormType::kLayerNorm;
  mc.norm_eps = cfg.double_or({"layernorm_epsilon"}, 1e-5);
  mc.final_norm = cfg.bool_or({"post_layer_norm"}, true);
  mc.activation = Activation::kSilu;
  mc.gated_mlp = true;
  mc.qkv_bias = cfg.bool_or({"add_qkv_bias"}, false);
  mc.qkv_per_head_layout = !multi_query;
  read_common(cfg, mc, false);

  // RotaryEmbedding(kv_channels // 2): the first half of each head turns, in
  // interleaved pairs, with frequencies base^(-2i / (kv_channels / 2)).
  mc.position = PositionType::kRotary;
  mc.rope.style = RotaryStyle::kInterleaved;
  mc.rope.dim = mc.size_per_head / 2;
  const double rope_ratio = cfg.double_or({"rope_ratio"}, 1.0);
  if (!(rope_ratio > 0))
    raise<InvalidArgument>("{}: field 'rope_ratio' must be positive, got {}", cfg.source(),
                           rope_ratio);
  mc.rope.theta = 10000.0;
  if (rope_ratio_interpolates) {
    if (rope_ratio != 1.0) {
      mc.rope.type = RopeType::kLinear;
      mc.rope.factor = rope_ratio;
    }
  } else {
    mc.rope.theta *= rope_ratio;
  }
  mc.rope.max_position_embeddings = mc.max_seq_len;
  return mc;
}

WeightMap chatglm_weights(const ModelConfig& mc) {
  const std::string l = "transformer.encoder.layers.{L}.";
  // Without multi_query_attention the fused rows are [head][q, k, v].
  const WeightTransform qkv_t =
      mc.qkv_per_head_layout ? WeightTransform::kQkvPerHead : WeightTransform::kNone;
  WeightMap m = {
      {Slot::kEmbedding, {"transformer.embedding.word_embeddings.weight"}},
      {Slot::kAttnNorm, {l + "input_layernorm.weight"}},
      {Slot::kQkv, {l + "self_attention.query_key_value.weight", qkv_t}},
      {Slot::kO, {l + "self_attention.dense.weight"}},
      {Slot::kMlpNorm, {l + "post_attention_layernorm.weight"}},
      {Slot::kGateUp, {l + "mlp.dense_h_to_4h.weight"}},
      {Slot::kDown, {l + "mlp.dense_4h_to_h.weight"}},
      {Slot::kLmHead, {"transformer.output_layer.weight", WeightTransform::kNone, true}},
  };
  if (mc.qkv_bias) m[Slot::kQkvBias] = {l + "self_attention.query_key_value.bias", qkv_t};
  if (mc.final_norm) m[Slot::kFinalNorm] = {"transformer.encoder.final_layernorm.weight"};
  if (mc.norm_type == NormType::kLayerNorm) {
    m[Slot::kAttnNormBias] = {l + "input_layernorm.bias"};
    m[Slot::kMlpNormBias] = {l + "post_attention_layernorm.bias"};
    if (mc.final_norm) m[Slot::kFinalNormBias] = {"transformer.encoder.final_layernorm.bias"};
  }
  return m;
}

}  // namespace

ArchSpec chatglm_spec() {
  ArchSpec s;
  s.family = "chatglm";
  s.architectures = {"ChatGLMModel", "ChatGLMForConditionalGeneration"};
  s.model_types = {"chatglm"};
  s.map_config = [](const HfConfig& cfg) { return map_chatglm(cfg, false); };
  s.map_weights = chatglm_weights;
  return s;
}

// Reached only by name (--model-type chatglm2): rope_ratio as ChatGLM2-6B-32k reads it.
ArchSpec chatglm2_spec() {
  ArchSpec s;
  s.family = "chatglm2";
  s.map_config = [](const HfConfig& cfg) { return map_chatglm(cfg, true); };
  s.map_weights = chatglm_weights;
  return s;
}

}  // namespace tachyon::arch
