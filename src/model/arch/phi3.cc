// Phi-3: Llama-like with a fused qkv_proj and a fused gate_up_proj; longrope scaling
// with original_max_position_embeddings at the top level of config.json.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec phi3_spec() {
  ArchSpec s;
  s.family = "phi3";
  s.architectures = {"Phi3ForCausalLM"};
  s.model_types = {"phi3"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.norm_eps = 1e-5;
    d.max_position_embeddings = 4096;
    ModelConfig mc = read_llama_like(cfg, d);
    read_sliding_window(cfg, mc, 0);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = llama_weights(mc);
    for (Slot x : {Slot::kQ, Slot::kK, Slot::kV, Slot::kQBias, Slot::kKBias, Slot::kVBias,
                   Slot::kGate, Slot::kUp, Slot::kGateBias, Slot::kUpBias})
      m.erase(x);
    const std::string l = "model.layers.{L}.";
    m[Slot::kQkv] = {l + "self_attn.qkv_proj.weight"};
    if (mc.qkv_bias) m[Slot::kQkvBias] = {l + "self_attn.qkv_proj.bias"};
    m[Slot::kGateUp] = {l + "mlp.gate_up_proj.weight"};
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
