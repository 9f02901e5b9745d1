// OpenELM (apple/OpenELM, remote code OpenELMForCausalLM): layer-wise scaling. Each
// layer has its own query heads (qkv_multipliers interpolated over the layers), KV heads
// (those over num_gqa_groups) and FFN width (ffn_multipliers, rounded to ffn_dim_divisor),
// all recomputed from the multipliers as the config class does; a fused qkv_proj per
// layer (rows [q heads; k heads; v heads]), per-head q/k RMSNorm, a gated FFN whose
// proj_1 rows are [gate; up], RMSNorm of eps 1e-6 everywhere, rotary on the whole head.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

namespace {

// The config class's make_divisible: v rounded to the nearest multiple of `divisor` (at
// least one), one more multiple when rounding lost over 10%.
int64_t make_divisible(double v, int64_t divisor) {
  int64_t out = static_cast<int64_t>(v + static_cast<double>(divisor) / 2) / divisor * divisor;
  out = std::max(out, divisor);
  if (static_cast<double>(out) < 0.9 * v) out += divisor;
  return out;
}

// round(x, 2) of Python: the double's exact value rounded to 2 decimals, ties to even.
double round2(double x) {
  return std::stod(fmt::format("{:.2f}", x));
}

// A multiplier per layer: one number for all, a pair interpolated over the layers as
// numpy.linspace does (then rounded to 2 decimals), or (allow_list) one per layer.
std::vector<double> per_layer_multipliers(const HfConfig& cfg, std::string_view field,
                                          double fallback, int32_t layers, bool allow_list) {
  const Json* v = cfg.find({field});
  if (v == nullptr || v->is_number()) {
    const double m = v == nullptr ? fallback : cfg.get_double({field}).value();
    return std::vector<double>(static_cast<size_t>(layers), m);
  }
  auto number = [&](const Json& e) {
    if (!e.is_number() || !std::isfinite(e.get<double>()) || e.get<double>() <= 0)
      raise<InvalidArgument>("{}: field '{}' must hold positive numbers, got {}", cfg.source(),
                             field, v->dump());
    return e.get<double>();
  };
  if (v->is_array() && v->size() == 2) {
    const double a = number((*v)[0]), b = number((*v)[1]);
    std::vector<double> out;
    const double step = layers > 1 ? (b - a) / (layers - 1) : 0.0;
    for (int32_t i = 0; i < layers; ++i)
      out.push_back(round2(i == layers - 1 && layers > 1 ? b : i * step + a));
    return out;
  }
  if (allow_list && v->is_array() && static_cast<int64_t>(v->size()) == layers) {
    std::vector<double> out;
    for (const Json& e : *v) out.push_back(number(e));
    return out;
  }
  raise<InvalidArgument>("{}: field '{}' must be a number or a pair{}, got {}", cfg.source(), field,
                         allow_list ? fmt::format(" or {} per-layer numbers", layers) : "",
                         v->dump());
}

// A per-layer list the checkpoint's config.json may carry (the config class's own
// output): when present it must be what the multipliers give.
void check_stored(const HfConfig& cfg, std::string_view field, const std::vector<int32_t>& want) {
  const Json* v = cfg.find({field});
  if (v == nullptr) return;
  bool same = v->is_array() && v->size() == want.size();
  for (size_t i = 0; same && i < want.size(); ++i)
    same = (*v)[i].is_number_integer() && (*v)[i].get<int64_t>() == want[i];
  if (!same)
    raise<InvalidArgument>("{}: field '{}' is {}, but the multipliers give {}", cfg.source(), field,
                           v->dump(), fmt::format("[{}]", fmt::join(want, ", ")));
}

ModelConfig map_openelm(const HfConfig& cfg) {
  ModelConfig mc;
  mc.hidden_size = cfg.size_or({"model_dim"}, 2048);
  const int64_t hd = cfg.size_or({"head_dim"}, 128);
  mc.size_per_head = to_i32(hd, "head_dim");
  mc.layer_num = to_i32(cfg.size_or({"num_transformer_layers"}, 12), "num_transformer_layers");
  const int64_t groups = cfg.size_or({"num_gqa_groups"}, 1);
  const int64_t divisor = cfg.size_or({"ffn_dim_divisor"}, 256);
  if (mc.hidden_size % hd != 0)
    raise<InvalidArgument>("{}: model_dim {} is not a multiple of head_dim {}", cfg.source(),
                           mc.hidden_size, hd);
  const std::vector<double> qkv =
      per_layer_multipliers(cfg, "qkv_multipliers", 1.0, mc.layer_num, false);
  const std::vector<double> ffn =
      per_layer_multipliers(cfg, "ffn_multipliers", 4.0, mc.layer_num, true);
  std::vector<int32_t> heads, kv_heads;
  for (int32_t l = 0; l < mc.layer_num; ++l) {
    const int64_t q_dim = make_divisible(static_cast<double>(mc.hidden_size) * qkv[l], hd * groups);
    heads.push_back(to_i32(q_dim / hd, "num_query_heads"));
    kv_heads.push_back(to_i32(q_dim / hd / groups, "num_kv_heads"));
    mc.layer_inter_size.push_back(
        make_divisible(ffn[l] * static_cast<double>(mc.hidden_size), divisor));
  }
  check_stored(cfg, "num_query_heads", heads);
  check_stored(cfg, "num_kv_heads", kv_heads);
  mc.layer_head_num = heads;
  mc.layer_head_num_kv = kv_heads;
  // The uniform fields hold the largest layer (the per-layer lists say each one's).
  mc.head_num = *std::max_element(heads.begin(), heads.end());
  mc.head_num_kv = mc.head_num / to_i32(groups, "num_gqa_groups");
  mc.inter_size = *std::max_element(mc.layer_inter_size.begin(), mc.layer_inter_size.end());
  mc.vocab_size = cfg.size_or({"vocab_size"}, 32000);
  mc.max_seq_len = cfg.size_or({"max_context_length"}, 2048);
  mc.norm_type = NormType::kRMSNorm;
  mc.norm_eps = 1e-6;  // OpenELMRMSNorm's default; the config has no eps
  mc.qk_norm = cfg.bool_or({"normalize_qk_projections"}, false);
  mc.activation = parse_activation(cfg.get_string({"activation_fn_name"}).value_or("swish"), cfg,
                                   "activation_fn_name");
  mc.gated_mlp = cfg.bool_or({"ffn_with_glu"}, true);
  // bos 1 and eos 2 are the config class's defaults; the output layer is the embedding
  // table with share_input_output_layers, and otherwise lm_head, tied to the embedding
  // unless tie_word_embeddings is false (PretrainedConfig's default is true).
  read_common(cfg, mc, true);
  if (!cfg.has({"bos_token_id"})) mc.bos_token_id = 1;
  if (!cfg.has({"eos_token_id"})) mc.eos_token_ids = {2};
  if (cfg.bool_or({"share_input_output_layers"}, false)) mc.tie_word_embeddings = true;
  mc.position = PositionType::kRotary;
  mc.rope.style = RotaryStyle::kHalf;
  mc.rope.dim = mc.size_per_head;
  mc.rope.theta = cfg.double_or({"rope_freq_constant"}, 10000.0);
  return mc;
}

WeightMap openelm_weights(const ModelConfig& mc) {
  const std::string l = "transformer.layers.{L}.";
  WeightMap m = {
      {Slot::kEmbedding, {"transformer.token_embeddings.weight"}},
      {Slot::kFinalNorm, {"transformer.norm.weight"}},
      {Slot::kAttnNorm, {l + "attn_norm.weight"}},
      {Slot::kQkv, {l + "attn.qkv_proj.weight"}},
      {Slot::kO, {l + "attn.out_proj.weight"}},
      {Slot::kMlpNorm, {l + "ffn_norm.weight"}},
      {mc.gated_mlp ? Slot::kGateUp : Slot::kUp, {l + "ffn.proj_1.weight"}},
      {Slot::kDown, {l + "ffn.proj_2.weight"}},
      {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
  };
  if (mc.qk_norm) {
    m[Slot::kQNorm] = {l + "attn.q_norm.weight"};
    m[Slot::kKNorm] = {l + "attn.k_norm.weight"};
  }
  return m;
}

}  // namespace

ArchSpec openelm_spec() {
  ArchSpec s;
  s.family = "openelm";
  s.architectures = {"OpenELMForCausalLM"};
  s.model_types = {"openelm"};
  s.map_config = map_openelm;
  s.map_weights = openelm_weights;
  return s;
}

}  // namespace tachyon::arch
