// Mixtral: Mistral with a sparse MoE MLP (softmax routing, top-k renormalised).
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec mixtral_spec() {
  ArchSpec s;
  s.family = "mixtral";
  s.architectures = {"MixtralForCausalLM"};
  s.model_types = {"mixtral"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.norm_eps = 1e-5;
    d.rope_theta = 1e6;
    d.max_position_embeddings = 4096 * 32;
    ModelConfig mc = read_llama_like(cfg, d);
    read_sliding_window(cfg, mc, 0);
    mc.moe.num_experts = to_i32(cfg.size_or({"num_local_experts"}, 8), "num_local_experts");
    mc.moe.top_k = to_i32(cfg.size_or({"num_experts_per_tok"}, 2), "num_experts_per_tok");
    mc.moe.inter_size = mc.inter_size;
    mc.moe.norm_topk_prob = true;
    mc.layer_moe = all_layers(mc, true);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = llama_weights(mc);
    m.erase(Slot::kGate);
    m.erase(Slot::kUp);
    m.erase(Slot::kDown);
    const std::string l = "model.layers.{L}.block_sparse_moe.";
    m[Slot::kRouter] = {
        l + "gate.weight", WeightTransform::kNone, false, {"model.layers.{L}.mlp.gate.weight"}};
    m[Slot::kExpertGate] = {l + "experts.{E}.w1.weight"};
    m[Slot::kExpertDown] = {l + "experts.{E}.w2.weight"};
    m[Slot::kExpertUp] = {l + "experts.{E}.w3.weight"};
    // transformers 5 writes all experts stacked.
    m[Slot::kExpertsGateUp] = {"model.layers.{L}.mlp.experts.gate_up_proj", WeightTransform::kNone,
                               true};
    m[Slot::kExpertsDown] = {"model.layers.{L}.mlp.experts.down_proj", WeightTransform::kNone,
                             true};
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
