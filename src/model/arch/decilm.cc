// DeciLM / Nemotron-NAS (DeciLMForCausalLM, model_type nemotron-nas: Llama-3.1-Nemotron-51B,
// Llama-3.3-Nemotron-Super-49B): Llama whose layers are searched blocks. block_configs[l]
// gives the layer's attention (no_op: none; replace_with_linear: a [hidden, hidden] linear
// map of the normed input; else n_heads_in_group query heads per KV head) and its FFN
// (no_op, replace_with_linear, or ffn_mult: intermediate size 2 * ffn_mult * hidden / 3
// truncated, rounded up to a multiple of 256).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

namespace {

// The modeling code's _ffn_mult_to_intermediate_size.
int64_t ffn_mult_to_inter(double mult, int64_t hidden) {
  const auto n = static_cast<int64_t>(2 * mult * static_cast<double>(hidden) / 3);
  return n % 256 == 0 ? n : n + 256 - n % 256;
}

// Fields of the newer block configs whose variants this mapping does not run.
void refuse_variants(const HfConfig& attn, const HfConfig& ffn) {
  for (std::string_view f : {"window_length", "num_sink_tokens", "mamba", "llama4"})
    if (attn.has({f}))
      raise<InvalidArgument>("{}: field '{}' (a block variant) is not supported", attn.source(), f);
  if (attn.bool_or({"is_mamba"}, false) || attn.bool_or({"is_llama4"}, false))
    raise<InvalidArgument>("{}: Mamba and Llama-4 attention blocks are not supported",
                           attn.source());
  if (ffn.has({"moe"}))
    raise<InvalidArgument>("{}: field 'moe' (a block variant) is not supported", ffn.source());
}

ModelConfig map_decilm(const HfConfig& cfg) {
  const Json* blocks = cfg.find({"block_configs"});
  if (blocks == nullptr || !blocks->is_array())
    raise<InvalidArgument>(
        "{}: field 'block_configs' must be a list of per-layer blocks (DeciLM's per-layer "
        "num_key_value_heads_per_layer layout is not supported)",
        cfg.source());
  const int64_t hidden = cfg.require_size({"hidden_size"});
  const int64_t heads = cfg.require_size({"num_attention_heads"});
  const int64_t layers = cfg.require_size({"num_hidden_layers"});
  if (static_cast<int64_t>(blocks->size()) != layers)
    raise<InvalidArgument>("{}: block_configs has {} entries for num_hidden_layers {}",
                           cfg.source(), blocks->size(), layers);
  std::vector<int32_t> q, kv;
  std::vector<int64_t> inter;
  std::vector<uint8_t> lin_attn, lin_mlp;
  for (int64_t l = 0; l < layers; ++l) {
    const HfConfig block((*blocks)[static_cast<size_t>(l)],
                         fmt::format("{} (block_configs[{}])", cfg.source(), l));
    const HfConfig attn = block.sub("attention"), ffn = block.sub("ffn");
    refuse_variants(attn, ffn);
    const bool attn_off = attn.bool_or({"no_op"}, false);
    const bool attn_lin = !attn_off && attn.bool_or({"replace_with_linear"}, false);
    int64_t h = 0, k = 0;
    if (!attn_off && !attn_lin) {
      const int64_t group = attn.require_size({"n_heads_in_group"});
      if (heads % group != 0)
        raise<InvalidArgument>("{}: n_heads_in_group {} does not divide num_attention_heads {}",
                               attn.source(), group, heads);
      h = heads;
      k = heads / group;
    }
    q.push_back(to_i32(h, "num_attention_heads"));
    kv.push_back(to_i32(k, "n_heads_in_group"));
    lin_attn.push_back(attn_lin ? 1 : 0);
    const bool ffn_off = ffn.bool_or({"no_op"}, false);
    const bool ffn_lin = !ffn_off && ffn.bool_or({"replace_with_linear"}, false);
    int64_t i = 0;
    if (!ffn_off && !ffn_lin) {
      const std::optional<double> mult = ffn.get_double({"ffn_mult"});
      if (!mult || *mult <= 0)
        raise<InvalidArgument>("{}: field 'ffn_mult' must be a positive number", ffn.source());
      i = ffn_mult_to_inter(*mult, hidden);
    }
    inter.push_back(i);
    lin_mlp.push_back(ffn_lin ? 1 : 0);
  }
  // The uniform fields (null in these configs) as the widest layer.
  Json j = cfg.json();
  j["num_key_value_heads"] = std::max<int64_t>(1, *std::max_element(kv.begin(), kv.end()));
  j["intermediate_size"] = std::max<int64_t>(1, *std::max_element(inter.begin(), inter.end()));
  LlamaLikeDefaults d;
  ModelConfig mc = read_llama_like(HfConfig(std::move(j), cfg.source()), d);
  mc.layer_head_num = std::move(q);
  mc.layer_head_num_kv = std::move(kv);
  mc.layer_inter_size = std::move(inter);
  mc.layer_linear_attn = std::move(lin_attn);
  mc.layer_linear_mlp = std::move(lin_mlp);
  return mc;
}

}  // namespace

ArchSpec decilm_spec() {
  ArchSpec s;
  s.family = "decilm";
  s.architectures = {"DeciLMForCausalLM"};
  s.model_types = {"nemotron-nas"};
  s.map_config = map_decilm;
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = llama_weights(mc);
    m[Slot::kLinearAttn] = {"model.layers.{L}.self_attn.linear_attn.weight"};
    m[Slot::kLinearMlp] = {"model.layers.{L}.mlp.linear_mlp.weight"};
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
