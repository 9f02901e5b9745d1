// GLM-4 (GlmForCausalLM): Llama-like with interleaved partial rotary, a fused
// gate_up_proj and q/k/v biases.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec glm_spec() {
  ArchSpec s;
  s.family = "glm";
  s.architectures = {"GlmForCausalLM"};
  s.model_types = {"glm"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.norm_eps = 1.5625e-07;
    d.head_dim = 128;
    d.partial_rotary_factor = 0.5;
    d.attention_bias = true;
    d.max_position_embeddings = 131072;
    ModelConfig mc = read_llama_like(cfg, d);
    mc.rope.style = RotaryStyle::kInterleaved;
    mc.o_bias = false;
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = llama_weights(mc);
    m.erase(Slot::kGate);
    m.erase(Slot::kUp);
    m[Slot::kGateUp] = {"model.layers.{L}.mlp.gate_up_proj.weight"};
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
