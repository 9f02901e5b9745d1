// Qwen2-MoE: Qwen2 attention, sparse MoE MLP plus a shared expert scaled by a sigmoid
// gate; dense MLP on mlp_only_layers and between decoder_sparse_step layers.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ArchSpec qwen2_moe_spec() {
  ArchSpec s;
  s.family = "qwen2_moe";
  s.architectures = {"Qwen2MoeForCausalLM"};
  s.model_types = {"qwen2_moe"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.max_position_embeddings = 32768;
    ModelConfig mc = read_llama_like(cfg, d);
    mc.qkv_bias = true;
    mc.o_bias = false;
    read_qwen_sliding(cfg, mc);
    mc.moe.num_experts = to_i32(cfg.size_or({"num_experts"}, 60, true), "num_experts");
    mc.moe.top_k = to_i32(cfg.size_or({"num_experts_per_tok"}, 4), "num_experts_per_tok");
    mc.moe.inter_size = cfg.size_or({"moe_intermediate_size"}, 1408);
    mc.moe.shared_inter_size = cfg.size_or({"shared_expert_intermediate_size"}, 5632, true);
    mc.moe.shared_expert_gate = mc.moe.shared_inter_size > 0;
    mc.moe.norm_topk_prob = cfg.bool_or({"norm_topk_prob"}, false);
    const int64_t step = cfg.size_or({"decoder_sparse_step"}, 1);
    mc.layer_moe = all_layers(mc, false);
    for (int32_t i = 0; i < mc.layer_num; ++i)
      mc.layer_moe[i] = mc.moe.num_experts > 0 && (i + 1) % step == 0;
    if (const Json* only = cfg.find({"mlp_only_layers"})) {
      if (!only->is_array())
        raise<InvalidArgument>("{}: field 'mlp_only_layers' must be a list", cfg.source());
      for (const Json& v : *only) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= mc.layer_num)
          raise<InvalidArgument>("{}: field 'mlp_only_layers' holds an invalid layer {}",
                                 cfg.source(), v.dump());
        mc.layer_moe[v.get<size_t>()] = 0;
      }
    }
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = llama_weights(mc);
    const std::string l = "model.layers.{L}.mlp.";
    m[Slot::kRouter] = {l + "gate.weight"};
    m[Slot::kExpertGate] = {l + "experts.{E}.gate_proj.weight"};
    m[Slot::kExpertUp] = {l + "experts.{E}.up_proj.weight"};
    m[Slot::kExpertDown] = {l + "experts.{E}.down_proj.weight"};
    m[Slot::kExpertsGateUp] = {l + "experts.gate_up_proj", WeightTransform::kNone, true};
    m[Slot::kExpertsDown] = {l + "experts.down_proj", WeightTransform::kNone, true};
    m[Slot::kSharedGate] = {l + "shared_expert.gate_proj.weight"};
    m[Slot::kSharedUp] = {l + "shared_expert.up_proj.weight"};
    m[Slot::kSharedDown] = {l + "shared_expert.down_proj.weight"};
    m[Slot::kSharedExpertGate] = {l + "shared_expert_gate.weight"};
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
