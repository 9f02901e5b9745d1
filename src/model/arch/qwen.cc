// Qwen (the first generation: Qwen-1.8B/7B/14B/72B, architectures QWenLMHeadModel,
// model_type "qwen", remote code): RMSNorm, fused c_attn ([q; k; v] with bias), c_proj
// without bias (no_bias), an MLP down(w1(x) * silu(w2(x))) — w2 is the gate — whose
// width is intermediate_size / 2, rotary (rotary_pct, rotary_emb_base).
//
// Past seq_length the modeling file extends the context two ways, both on by default
// in the published configs: use_dynamic_ntk grows the rotary base with an alpha fixed by
// the prompt length (RopeType::kQwenDynamic), and use_logn_attn multiplies each query
// at position p by log(p + 1) / log(seq_length). Its log-n table covers positions up to
// 32766, which bounds the context when either is on.
#include <algorithm>

#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {
namespace {

constexpr int64_t kLognTableLen = 32767;  // range(1, 32768) in the modeling file

ModelConfig map_qwen(const HfConfig& cfg) {
  ModelConfig mc;
  mc.hidden_size = cfg.require_size({"hidden_size"});
  const int64_t heads = cfg.require_size({"num_attention_heads"});
  mc.head_num = mc.head_num_kv = to_i32(heads, "num_attention_heads");
  mc.size_per_head =
      head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads", {});
  // The modeling file splits heads by hidden_size / num_attention_heads and projects to
  // kv_channels * num_attention_heads: the two must agree.
  if (const auto kv = cfg.get_int({"kv_channels"}); kv && *kv != mc.size_per_head)
    raise<InvalidArgument>(
        "{}: field 'kv_channels' ({}) must equal hidden_size / num_attention_heads ({})",
        cfg.source(), *kv, mc.size_per_head);
  mc.layer_num = to_i32(cfg.require_size({"num_hidden_layers"}), "num_hidden_layers");
  const int64_t inter = cfg.require_size({"intermediate_size"});
  if (inter % 2 != 0)
    raise<InvalidArgument>("{}: field 'intermediate_size' ({}) must be even (w1 and w2 are half)",
                           cfg.source(), inter);
  mc.inter_size = inter / 2;
  mc.vocab_size = cfg.require_size({"vocab_size"});
  mc.norm_type = NormType::kRMSNorm;
  mc.norm_eps = cfg.double_or({"layer_norm_epsilon"}, 1e-6);
  mc.activation = Activation::kSilu;
  mc.gated_mlp = true;
  mc.qkv_bias = true;
  const bool bias = !cfg.bool_or({"no_bias"}, true);
  mc.o_bias = mc.mlp_bias = bias;
  read_common(cfg, mc, false);

  const int64_t seq_length = cfg.require_size({"seq_length"});
  const bool dynamic_ntk = cfg.bool_or({"use_dynamic_ntk"}, true);
  const bool logn = cfg.bool_or({"use_logn_attn"}, true);
  mc.max_seq_len = std::max(seq_length, cfg.size_or({"max_position_embeddings"}, seq_length));
  if (dynamic_ntk || logn) mc.max_seq_len = std::max(mc.max_seq_len, kLognTableLen);
  if (logn) mc.logn_scaling_len = seq_length;

  mc.position = PositionType::kRotary;
  mc.rope.style = RotaryStyle::kHalf;
  const double pct = cfg.double_or({"rotary_pct"}, 1.0);
  if (!(pct > 0 && pct <= 1))
    raise<InvalidArgument>("{}: field 'rotary_pct' must be in (0, 1], got {}", cfg.source(), pct);
  mc.rope.dim = pct == 1.0 ? mc.size_per_head
                           : static_cast<int32_t>(static_cast<double>(mc.size_per_head) * pct);
  mc.rope.theta = cfg.double_or({"rotary_emb_base"}, 10000.0);
  if (!(mc.rope.theta > 1))
    raise<InvalidArgument>("{}: field 'rotary_emb_base' must be > 1", cfg.source());
  if (dynamic_ntk) {
    mc.rope.type = RopeType::kQwenDynamic;
    mc.rope.original_max_position = seq_length;
  }
  mc.rope.max_position_embeddings = mc.max_seq_len;
  return mc;
}

WeightMap qwen_weights(const ModelConfig& mc) {
  const std::string l = "transformer.h.{L}.";
  WeightMap m = {
      {Slot::kEmbedding, {"transformer.wte.weight"}},
      {Slot::kAttnNorm, {l + "ln_1.weight"}},
      {Slot::kQkv, {l + "attn.c_attn.weight"}},
      {Slot::kQkvBias, {l + "attn.c_attn.bias"}},
      {Slot::kO, {l + "attn.c_proj.weight"}},
      {Slot::kMlpNorm, {l + "ln_2.weight"}},
      {Slot::kGate, {l + "mlp.w2.weight"}},
      {Slot::kUp, {l + "mlp.w1.weight"}},
      {Slot::kDown, {l + "mlp.c_proj.weight"}},
      {Slot::kFinalNorm, {"transformer.ln_f.weight"}},
      {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
  };
  if (mc.o_bias) m[Slot::kOBias] = {l + "attn.c_proj.bias"};
  if (mc.mlp_bias) {
    m[Slot::kGateBias] = {l + "mlp.w2.bias"};
    m[Slot::kUpBias] = {l + "mlp.w1.bias"};
    m[Slot::kDownBias] = {l + "mlp.c_proj.bias"};
  }
  return m;
}

}  // namespace

ArchSpec qwen_spec() {
  ArchSpec s;
  s.family = "qwen";
  s.architectures = {"QWenLMHeadModel"};
  s.model_types = {"qwen"};
  s.map_config = map_qwen;
  s.map_weights = qwen_weights;
  return s;
}

}  // namespace tachyon::arch
