// InternLM (first generation, InternLMForCausalLM) and InternLM2 / InternLM2.5
// (InternLM2ForCausalLM), both remote code.
//
// InternLM is the Llama layout with biases on q, k, v and o (config field `bias`,
// true by default) and its rotary settings in a `rotary` object: {"base", "type":
// "origin" | "dynamic", "scaling_factor"}; "dynamic" is the Llama dynamic NTK.
//
// InternLM2 renames the Llama tensors (tok_embeddings, attention.wqkv, attention.wo,
// feed_forward.w1/w3/w2, attention_norm, ffn_norm, output) and packs wqkv per key/value
// head: rows [kv head][q x group, k, v][head_dim]. Its rope_theta / rope_scaling follow
// Llama's classic spelling.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {
namespace {

ModelConfig map_internlm(const HfConfig& cfg) {
  LlamaLikeDefaults d;
  d.max_position_embeddings = 2048;
  ModelConfig mc = read_llama_like(cfg, d);
  mc.qkv_bias = mc.o_bias = cfg.bool_or({"bias"}, true);
  mc.mlp_bias = false;
  HfConfig rotary = cfg.sub("rotary");
  mc.rope.theta = rotary.double_or({"base"}, 10000.0);
  if (!(mc.rope.theta > 1))
    raise<InvalidArgument>("{}: field 'rotary.base' must be > 1", cfg.source());
  const std::string type = rotary.get_string({"type"}).value_or("origin");
  if (type == "dynamic") {
    mc.rope.type = RopeType::kDynamic;
    mc.rope.factor = rotary.double_or({"scaling_factor"}, 1.0);
    if (!(mc.rope.factor > 0))
      raise<InvalidArgument>("{}: field 'rotary.scaling_factor' must be positive", cfg.source());
    // As for Llama's dynamic scaling, the factor stretches the usable context.
    if (mc.rope.factor > 1)
      mc.max_seq_len = static_cast<int64_t>(static_cast<double>(mc.max_seq_len) * mc.rope.factor);
  } else if (type != "origin") {
    raise<InvalidArgument>("{}: field 'rotary.type': unsupported '{}' (origin, dynamic)",
                           cfg.source(), type);
  }
  return mc;
}

ModelConfig map_internlm2(const HfConfig& cfg) {
  LlamaLikeDefaults d;
  d.max_position_embeddings = 2048;
  ModelConfig mc = read_llama_like(cfg, d);
  mc.qkv_bias = mc.o_bias = cfg.bool_or({"bias"}, true);
  mc.mlp_bias = false;
  return mc;
}

WeightMap internlm2_weights(const ModelConfig& mc) {
  const std::string l = "model.layers.{L}.";
  const auto grouped = WeightTransform::kQkvGrouped;
  WeightMap m = {
      {Slot::kEmbedding, {"model.tok_embeddings.weight"}},
      {Slot::kAttnNorm, {l + "attention_norm.weight"}},
      {Slot::kQkv, {l + "attention.wqkv.weight", grouped}},
      {Slot::kO, {l + "attention.wo.weight"}},
      {Slot::kMlpNorm, {l + "ffn_norm.weight"}},
      {Slot::kGate, {l + "feed_forward.w1.weight"}},
      {Slot::kUp, {l + "feed_forward.w3.weight"}},
      {Slot::kDown, {l + "feed_forward.w2.weight"}},
      {Slot::kFinalNorm, {"model.norm.weight"}},
      {Slot::kLmHead, {"output.weight", WeightTransform::kNone, true}},
  };
  if (mc.qkv_bias) m[Slot::kQkvBias] = {l + "attention.wqkv.bias", grouped};
  if (mc.o_bias) m[Slot::kOBias] = {l + "attention.wo.bias"};
  return m;
}

}  // namespace

ArchSpec internlm_spec() {
  ArchSpec s;
  s.family = "internlm";
  s.architectures = {"InternLMForCausalLM"};
  s.model_types = {"internlm"};
  s.map_config = map_internlm;
  s.map_weights = [](const ModelConfig& mc) { return llama_weights(mc); };
  return s;
}

ArchSpec internlm2_spec() {
  ArchSpec s;
  s.family = "internlm2";
  s.architectures = {"InternLM2ForCausalLM"};
  s.model_types = {"internlm2"};
  s.map_config = map_internlm2;
  s.map_weights = internlm2_weights;
  return s;
}

}  // namespace tachyon::arch
