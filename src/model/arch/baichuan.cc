// Baichuan and Baichuan2 (remote-code checkpoints, model_type "baichuan"): Llama blocks
// with q/k/v fused in W_pack (rows [q; k; v], no bias).
//
// The published modeling files differ by size and generation, and config.json tells
// which one a checkpoint ships:
//   - the 7B files (BaiChuanForCausalLM of Baichuan-7B, BaichuanForCausalLM of
//     Baichuan2-7B) use rotary positions and read max_position_embeddings;
//   - the 13B files (Baichuan-13B, Baichuan2-13B) use ALiBi (Bloom's slopes, bias
//     slope * key index added after the 1/sqrt(d) scale) and read model_max_length,
//     which their config class carries instead of max_position_embeddings;
//   - Baichuan2's lm_head is a NormHead: its rows are L2-normalised at inference.
//     Baichuan2's config class adds z_loss_weight, and its vocabulary has 125696
//     tokens; family "baichuan2" (--model-type baichuan2) forces it.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {
namespace {

constexpr int64_t kBaichuan2Vocab = 125696;

ModelConfig map_baichuan(const HfConfig& cfg, bool force_norm_head) {
  ModelConfig mc;
  mc.hidden_size = cfg.require_size({"hidden_size"});
  const int64_t heads = cfg.require_size({"num_attention_heads"});
  mc.head_num = mc.head_num_kv = to_i32(heads, "num_attention_heads");
  mc.size_per_head =
      head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "num_attention_heads", {});
  mc.layer_num = to_i32(cfg.require_size({"num_hidden_layers"}), "num_hidden_layers");
  mc.inter_size = cfg.require_size({"intermediate_size"});
  mc.vocab_size = cfg.require_size({"vocab_size"});
  mc.norm_type = NormType::kRMSNorm;
  mc.norm_eps = cfg.double_or({"rms_norm_eps"}, 1e-6);
  mc.activation =
      parse_activation(cfg.get_string({"hidden_act"}).value_or("silu"), cfg, "hidden_act");
  mc.gated_mlp = true;
  read_common(cfg, mc, false);

  std::string arch;
  if (const Json* a = cfg.find({"architectures"});
      a != nullptr && a->is_array() && !a->empty() && (*a)[0].is_string())
    arch = (*a)[0].get<std::string>();
  const bool rotary = arch == "BaiChuanForCausalLM" || cfg.has({"max_position_embeddings"});
  if (rotary) {
    mc.max_seq_len = cfg.size_or({"max_position_embeddings"}, 4096);
    mc.position = PositionType::kRotary;
    mc.rope.style = RotaryStyle::kHalf;
    read_rope(cfg, mc, 10000.0, 1.0);
  } else {
    mc.max_seq_len = cfg.size_or({"model_max_length"}, 4096);
    mc.position = PositionType::kAlibi;
    mc.alibi_style = AlibiStyle::kBloom;
  }
  mc.lm_head_normalized =
      force_norm_head || cfg.has({"z_loss_weight"}) || mc.vocab_size == kBaichuan2Vocab;
  return mc;
}

WeightMap baichuan_weights(const ModelConfig& mc) {
  WeightMap m = llama_weights(mc);
  for (Slot s : {Slot::kQ, Slot::kK, Slot::kV}) m.erase(s);
  m[Slot::kQkv] = {"model.layers.{L}.self_attn.W_pack.weight"};
  if (mc.lm_head_normalized) m[Slot::kLmHead] = {"lm_head.weight", WeightTransform::kNormalizeRows};
  return m;
}

}  // namespace

ArchSpec baichuan_spec() {
  ArchSpec s;
  s.family = "baichuan";
  s.architectures = {"BaichuanForCausalLM", "BaiChuanForCausalLM"};
  s.model_types = {"baichuan"};
  s.map_config = [](const HfConfig& cfg) { return map_baichuan(cfg, false); };
  s.map_weights = baichuan_weights;
  return s;
}

// Reached only by name (--model-type baichuan2): a Baichuan2 checkpoint whose config
// does not show it.
ArchSpec baichuan2_spec() {
  ArchSpec s;
  s.family = "baichuan2";
  s.map_config = [](const HfConfig& cfg) { return map_baichuan(cfg, true); };
  s.map_weights = baichuan_weights;
  return s;
}

}  // namespace tachyon::arch
