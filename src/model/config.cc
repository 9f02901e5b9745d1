#include "model/config.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace tachyon {

std::string_view activation_name(Activation act) {
  switch (act) {
    case Activation::kIdentity:
      return "identity";
    case Activation::kSilu:
      return "silu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kRelu:
      return "relu";
    case Activation::kQuickGelu:
      return "quick_gelu";
  }
  return "?";
}

std::string_view rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kLongrope:
      return "longrope";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kQwenDynamic:
      return "qwen_dynamic";
  }
  return "?";
}

namespace {
std::string_view position_name(PositionType p) {
  switch (p) {
    case PositionType::kNone:
      return "none";
    case PositionType::kRotary:
      return "rotary";
    case PositionType::kAlibi:
      return "alibi";
    case PositionType::kLearned:
      return "learned";
  }
  return "?";
}
std::string_view rotary_style_name(RotaryStyle s) {
  switch (s) {
    case RotaryStyle::kNone:
      return "none";
    case RotaryStyle::kHalf:
      return "half";
    case RotaryStyle::kInterleaved:
      return "interleaved";
    case RotaryStyle::kHalf2D:
      return "half_2d";
  }
  return "?";
}
}  // namespace

double ModelConfig::softmax_scale(int layer) const {
  double s = attn_scale > 0 ? attn_scale : 1.0 / std::sqrt(static_cast<double>(size_per_head));
  if (attn_scale_inverse_layer) s /= static_cast<double>(layer + 1);
  return s;
}

int32_t ModelConfig::heads(int layer) const {
  return layer_head_num.empty() ? head_num : layer_head_num[static_cast<size_t>(layer)];
}

int32_t ModelConfig::kv_heads(int layer) const {
  if (!layer_head_num_kv.empty()) return layer_head_num_kv[static_cast<size_t>(layer)];
  if (heads(layer) == 0) return 0;
  return head_num_kv == head_num ? heads(layer) : head_num_kv;
}

int64_t ModelConfig::inter(int layer) const {
  return layer_inter_size.empty() ? inter_size : layer_inter_size[static_cast<size_t>(layer)];
}

void ModelConfig::validate() const {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) raise<InvalidArgument>("model config: {} must be positive, got {}", name, v);
  };
  positive(head_num, "head_num (number of attention heads)");
  positive(head_num_kv, "head_num_kv (number of key/value heads)");
  positive(size_per_head, "size_per_head (head_dim)");
  positive(layer_num, "layer_num (number of layers)");
  positive(hidden_size, "hidden_size");
  positive(vocab_size, "vocab_size");
  positive(max_seq_len, "max_seq_len (max_position_embeddings)");
  // Token ids, positions, lengths and row counts are 32-bit through the engine, the
  // kernels and the KV cache: a size past that range would be silently truncated.
  auto at_most_i32 = [&](int64_t v, const char* name) {
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (v > kMax)
      raise<InvalidArgument>("model config: {} is {}; the largest supported is {}", name, v, kMax);
  };
  at_most_i32(max_seq_len, "max_seq_len (max_position_embeddings)");
  at_most_i32(vocab_size, "vocab_size");
  at_most_i32(hidden_size, "hidden_size");
  at_most_i32(inter_size, "inter_size (intermediate_size)");
  at_most_i32(word_embed_proj_dim, "word_embed_proj_dim");
  at_most_i32(moe.inter_size, "moe inter_size (moe_intermediate_size)");
  at_most_i32(moe.shared_inter_size, "moe shared_inter_size (shared_expert_intermediate_size)");
  at_most_i32(logn_scaling_len, "logn_scaling_len (seq_length)");
  at_most_i32(rope.original_max_position, "rope original_max_position_embeddings");
  at_most_i32(rope.max_position_embeddings, "rope max_position_embeddings");
  for (int64_t id : eos_token_ids) at_most_i32(id, "eos_token_id");
  if (head_num % head_num_kv != 0)
    raise<InvalidArgument>("model config: head_num_kv ({}) must divide head_num ({})", head_num_kv,
                           head_num);
  if (!(norm_eps > 0))
    raise<InvalidArgument>("model config: norm eps must be positive, got {}", norm_eps);
  if (moe.num_experts > 0) {
    positive(moe.top_k, "moe top_k (num_experts_per_tok)");
    positive(moe.inter_size, "moe inter_size (moe_intermediate_size)");
    if (moe.top_k > moe.num_experts)
      raise<InvalidArgument>(
          "model config: num_experts_per_tok ({}) exceeds the number of experts ({})", moe.top_k,
          moe.num_experts);
  }
  bool any_dense = layer_moe.empty();
  for (uint8_t m : layer_moe) any_dense |= m == 0;
  if (any_dense && layer_inter_size.empty()) positive(inter_size, "inter_size (intermediate_size)");
  if (!layer_moe.empty() && static_cast<int32_t>(layer_moe.size()) != layer_num)
    raise<InvalidArgument>("model config: {} MoE layer flags for {} layers", layer_moe.size(),
                           layer_num);
  auto per_layer = [&](size_t n, const char* name) {
    if (n != 0 && n != static_cast<size_t>(layer_num))
      raise<InvalidArgument>("model config: {} has {} entries for {} layers", name, n, layer_num);
  };
  per_layer(layer_head_num.size(), "layer_head_num");
  per_layer(layer_head_num_kv.size(), "layer_head_num_kv");
  per_layer(layer_inter_size.size(), "layer_inter_size");
  per_layer(layer_linear_attn.size(), "layer_linear_attn");
  per_layer(layer_linear_mlp.size(), "layer_linear_mlp");
  for (int l = 0; l < layer_num && per_layer_shapes(); ++l) {
    const int32_t h = heads(l), kv = kv_heads(l);
    const int64_t i = inter(l);
    if (h < 0 || kv < 0 || i < 0)
      raise<InvalidArgument>(
          "model config: layer {} has {} heads, {} KV heads, intermediate size {}", l, h, kv, i);
    at_most_i32(i, "layer_inter_size");
    if ((h == 0) != (kv == 0) || (kv > 0 && h % kv != 0))
      raise<InvalidArgument>(
          "model config: layer {}: {} KV heads for {} heads (a divisor, and 0 only with 0 heads)",
          l, kv, h);
    if ((linear_attention(l) && h != 0) || (linear_mlp(l) && (i != 0 || is_moe(l))))
      raise<InvalidArgument>(
          "model config: layer {} replaces its attention or MLP by a linear map but has {} "
          "heads, intermediate size {}",
          l, h, i);
    if ((linear_attention(l) || linear_mlp(l)) &&
        (post_norm || residual_from_norm || parallel_residual || sandwich_norm))
      raise<InvalidArgument>(
          "model config: layer {}: a block replaced by a linear map needs the pre-norm form", l);
    if ((h == 0 || (i == 0 && !is_moe(l))) &&
        (post_norm || residual_from_norm || (parallel_residual && parallel_shared_norm)))
      raise<InvalidArgument>(
          "model config: layer {} lacks its attention or MLP, which this residual form "
          "(post-norm, residual from the norm, or a shared parallel norm) cannot do without",
          l);
  }
  bool any_attention = false;
  for (int l = 0; l < layer_num; ++l) any_attention |= heads(l) > 0;
  if (!any_attention) raise<InvalidArgument>("model config: no layer has attention heads");
  if (!layer_sliding.empty() && static_cast<int32_t>(layer_sliding.size()) != layer_num)
    raise<InvalidArgument>("model config: {} layer types for {} layers", layer_sliding.size(),
                           layer_num);
  if (sliding_window < 0) raise<InvalidArgument>("model config: sliding_window must be >= 0");
  if (logn_scaling_len < 0 || logn_scaling_len == 1)
    raise<InvalidArgument>("model config: logn_scaling_len must be 0 or > 1, got {}",
                           logn_scaling_len);
  if (position == PositionType::kRotary) {
    if (rope.dim <= 0 || rope.dim % 2 != 0 || rope.dim > size_per_head)
      raise<InvalidArgument>("model config: rotary dims {} must be even and within head_dim {}",
                             rope.dim, size_per_head);
  }
  if (position == PositionType::kRotary && rope.type == RopeType::kQwenDynamic &&
      (rope.original_max_position <= 0 || rope.dim <= 2))
    raise<InvalidArgument>(
        "model config: Qwen dynamic NTK needs the training length (seq_length) and more than 2 "
        "rotary dims");
  if (glm_2d_positions() && (rope.dim % 4 != 0 || rope.type != RopeType::kDefault))
    raise<InvalidArgument>(
        "model config: 2-D positions need a multiple of 4 rotary dims (got {}) and unscaled "
        "frequencies",
        rope.dim);
  if (needs_prompt_layout()) {
    if (!glm_prompt.enabled() || glm_prompt.context_end_token >= vocab_size ||
        (glm_2d_positions() && glm_prompt.mask_token_ids.empty()))
      raise<InvalidArgument>(
          "model config: 2-D positions and a bidirectional context need the <sop> token (got {}) "
          "and mask tokens inside the vocabulary of {}",
          glm_prompt.context_end_token, vocab_size);
    for (int64_t id : glm_prompt.mask_token_ids)
      if (id < 0 || id >= vocab_size)
        raise<InvalidArgument>("model config: mask token id {} outside the vocabulary of {}", id,
                               vocab_size);
  }
  if (bidirectional_context && sliding_window > 0)
    raise<InvalidArgument>("model config: a bidirectional context with a sliding window");
  if (residual_from_norm && (post_norm || parallel_residual || sandwich_norm ||
                             !std::isfinite(residual_scale) || !(residual_scale > 0)))
    raise<InvalidArgument>(
        "model config: a residual from the norm output (scale {}) goes with pre-norm serial "
        "blocks only",
        residual_scale);
  if (attn_softcap < 0 || final_softcap < 0 || clip_qkv < 0)
    raise<InvalidArgument>("model config: softcap / clip values must be non-negative");
  for (int64_t id : eos_token_ids)
    if (id >= vocab_size)
      raise<InvalidArgument>("model config: eos_token_id {} >= vocab_size {}", id, vocab_size);
}

Json ModelConfig::to_json() const {
  Json j;
  j["architecture"] = architecture;
  j["model_type"] = model_type;
  j["family"] = family;
  j["head_num"] = head_num;
  j["head_num_kv"] = head_num_kv;
  j["size_per_head"] = size_per_head;
  j["layer_num"] = layer_num;
  j["hidden_size"] = hidden_size;
  j["inter_size"] = inter_size;
  j["vocab_size"] = vocab_size;
  j["max_seq_len"] = max_seq_len;
  j["norm"] = {{"type", norm_type == NormType::kRMSNorm ? "rmsnorm" : "layernorm"},
               {"eps", norm_eps},
               {"weight_offset", norm_weight_offset},
               {"placement", post_norm ? "post" : "pre"},
               {"sandwich", sandwich_norm},
               {"embedding_norm", embedding_norm},
               {"final_norm", final_norm},
               {"qk_norm", qk_norm}};
  j["activation"] = activation_name(activation);
  j["gated_mlp"] = gated_mlp;
  j["bias"] = {{"qkv", qkv_bias}, {"o", o_bias}, {"mlp", mlp_bias}, {"lm_head", lm_head_bias}};
  Json pos = {{"type", position_name(position)}};
  if (position == PositionType::kRotary) {
    pos["style"] = rotary_style_name(rope.style);
    pos["dim"] = rope.dim;
    pos["theta"] = rope.theta;
    pos["scaling"] = rope_type_name(rope.type);
    if (rope.type != RopeType::kDefault) pos["factor"] = rope.factor;
    if (rope.original_max_position > 0) pos["original_max_position"] = rope.original_max_position;
    if (rope.inv_freq_f16) pos["inv_freq_f16"] = true;
    if (glm_2d_positions())
      pos["glm_2d"] = {{"context_end_token", glm_prompt.context_end_token},
                       {"mask_token_ids", glm_prompt.mask_token_ids}};
  } else if (position == PositionType::kAlibi) {
    pos["style"] = alibi_style == AlibiStyle::kBloom ? "bloom" : "mpt";
    pos["scaled"] = alibi_scaled;
  } else if (position == PositionType::kLearned) {
    pos["offset"] = learned_pos_offset;
  }
  j["position"] = pos;
  j["attention"] = {{"scale", softmax_scale(0)}, {"logn_scaling_len", logn_scaling_len},
                    {"softcap", attn_softcap},   {"final_softcap", final_softcap},
                    {"clip_qkv", clip_qkv},      {"sliding_window", sliding_window}};
  if (!layer_sliding.empty()) j["attention"]["layer_sliding"] = layer_sliding;
  if (!layer_head_num.empty()) j["layer_head_num"] = layer_head_num;
  if (!layer_head_num_kv.empty()) j["layer_head_num_kv"] = layer_head_num_kv;
  if (!layer_inter_size.empty()) j["layer_inter_size"] = layer_inter_size;
  if (!layer_linear_attn.empty()) j["layer_linear_attn"] = layer_linear_attn;
  if (!layer_linear_mlp.empty()) j["layer_linear_mlp"] = layer_linear_mlp;
  if (bidirectional_context) j["attention"]["bidirectional_context"] = true;
  j["parallel_residual"] = parallel_residual;
  if (residual_from_norm) j["residual_from_norm"] = {{"scale", residual_scale}};
  if (parallel_residual) j["parallel_shared_norm"] = parallel_shared_norm;
  if (moe.num_experts > 0) {
    j["moe"] = {{"num_experts", moe.num_experts},
                {"top_k", moe.top_k},
                {"inter_size", moe.inter_size},
                {"norm_topk_prob", moe.norm_topk_prob},
                {"shared_inter_size", moe.shared_inter_size},
                {"shared_expert_gate", moe.shared_expert_gate},
                {"layer_moe", layer_moe}};
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (lm_head_normalized) j["lm_head_normalized"] = true;
  j["embedding_scale"] = embedding_scale;
  if (word_embed_proj_dim > 0) j["word_embed_proj_dim"] = word_embed_proj_dim;
  j["eos_token_ids"] = eos_token_ids;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (pad_token_id) j["pad_token_id"] = *pad_token_id;
  j["dtype"] = dtype_name(dtype);
  if (quant.enabled()) j["quantization"] = quant.to_json();
  return j;
}

}  // namespace tachyon
