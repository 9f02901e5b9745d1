// The first ChatGLM-6B (THUDM/chatglm-6b, its own modeling_chatglm.py): architectures
// ChatGLMModel / ChatGLMForConditionalGeneration and model_type "chatglm" as ChatGLM2/3,
// told apart by the fields only its config has (position_encoding_2d,
// inner_hidden_size). Its modeling file, in this framework's terms:
//   - LayerNorm everywhere (with bias), GELU in its tanh form, biases on every linear;
//   - query_key_value rows per head [q, k, v] (reordered at load);
//   - the residual is the norm's output scaled by alpha = sqrt(2 * num_layers):
//     h = alpha * LN1(x) + attn(LN1(x)), out = alpha * LN2(h) + mlp(LN2(h));
//   - 2-D rotary positions: each head's halves are two rotate_half rotaries of
//     head_dim / 2 dims (base 10000, inv_freq rounded to float16 as the file does), the
//     first turned by the position, the second by the block position;
//   - a prefix-LM prompt: the tokens before <sop> (bos_token_id) attend bidirectionally;
//     positions and mask follow the prompt's [gMASK] / [MASK] and <sop>
//     (model/prompt_layout.h);
//   - the attention's query_key_layer_scaling_coeff (layer + 1) divides the queries and
//     multiplies the scores again before the softmax: it cancels, the scale is
//     1 / sqrt(head_dim);
//   - lm_head tied to the word embeddings: the config class leaves tie_word_embeddings
//     at transformers' default (true) and the model defines get_output_embeddings, so
//     from_pretrained ties them (the hub's lm_head.weight holds the same values).
// Refused by field: quantization_bit != 0 (the file's own int4/int8 weights),
// pre_seq_len (P-tuning prefixes), position_encoding_2d = false.
#include <cmath>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

bool is_chatglm6b_config(const HfConfig& cfg) {
  return cfg.has({"position_encoding_2d"}) || cfg.has({"inner_hidden_size"});
}

namespace {

ModelConfig map_chatglm6b(const HfConfig& cfg) {
  if (!cfg.bool_or({"position_encoding_2d"}, true))
    raise<InvalidArgument>(
        "{}: field 'position_encoding_2d' = false (ChatGLM-6B with 1-D positions) is not "
        "supported",
        cfg.source());
  refuse_chatglm_extras(cfg);

  ModelConfig mc;
  mc.hidden_size = cfg.require_size({"hidden_size"});
  const int64_t heads = cfg.require_size({"num_attention_heads"});
  mc.head_num = to_i32(heads, "num_attention_heads");
  mc.head_num_kv = mc.head_num;
  mc.size_per_head =
      head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads", {});
  if (mc.size_per_head % 4 != 0)
    raise<InvalidArgument>(
        "{}: hidden_size / num_attention_heads = {} must be a multiple of 4 (each half of a head "
        "is a rotary of its own)",
        cfg.source(), mc.size_per_head);
  mc.layer_num = to_i32(cfg.require_size({"num_layers"}), "num_layers");
  // ChatGLMConfig's defaults for the fields a config may omit.
  mc.inter_size = cfg.size_or({"inner_hidden_size"}, 16384);
  mc.vocab_size = cfg.require_size({"vocab_size"});
  mc.max_seq_len = cfg.size_or({"max_sequence_length"}, 2048);
  mc.norm_type = NormType::kLayerNorm;
  mc.norm_eps = cfg.double_or({"layernorm_epsilon"}, 1e-5);
  mc.final_norm = true;
  mc.activation = Activation::kGeluTanh;
  mc.gated_mlp = false;
  mc.qkv_bias = mc.o_bias = mc.mlp_bias = true;
  mc.qkv_per_head_layout = true;
  read_common(cfg, mc, /*tie_default=*/true);
  if (!cfg.has({"eos_token_id"})) mc.eos_token_ids = {130005};
  const int64_t sop = cfg.int_or({"bos_token_id"}, 130004);
  if (!cfg.has({"bos_token_id"})) mc.bos_token_id = sop;

  mc.position = PositionType::kRotary;
  mc.rope.style = RotaryStyle::kHalf2D;
  mc.rope.dim = mc.size_per_head;
  mc.rope.theta = 10000.0;
  mc.rope.inv_freq_f16 = true;
  mc.rope.max_position_embeddings = mc.max_seq_len;
  mc.glm_prompt.context_end_token = sop;
  // prepare_inputs_for_generation: [gMASK] when the prompt has one, else [MASK].
  mc.glm_prompt.mask_token_ids = {cfg.int_or({"gmask_token_id"}, 130001),
                                  cfg.int_or({"mask_token_id"}, 130000)};
  mc.bidirectional_context = true;
  mc.residual_from_norm = true;
  mc.residual_scale = std::sqrt(2.0 * mc.layer_num);
  return mc;
}

WeightMap chatglm6b_weights(const ModelConfig&) {
  WeightMap m = {
      {Slot::kEmbedding, {"transformer.word_embeddings.weight"}},
      {Slot::kFinalNorm, {"transformer.final_layernorm.weight"}},
      {Slot::kFinalNormBias, {"transformer.final_layernorm.bias"}},
      {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
  };
  add_megatron_layer(m, "transformer.layers.{L}.", "attention", true);
  return m;
}

}  // namespace

// Reached by name (--model-type chatglm6b), or as the chatglm entry's variant: a
// ChatGLMModel config with ChatGLM-6B's fields.
ArchSpec chatglm6b_spec() {
  ArchSpec s;
  s.family = "chatglm6b";
  s.map_config = map_chatglm6b;
  s.map_weights = chatglm6b_weights;
  s.variant_of = "chatglm";
  s.is_variant = is_chatglm6b_config;
  return s;
}

}  // namespace tachyon::arch
