// Qwen3: Llama with per-head q/k RMSNorm and an explicit head_dim.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec qwen3_spec() {
  ArchSpec s;
  s.family = "qwen3";
  s.architectures = {"Qwen3ForCausalLM"};
  s.model_types = {"qwen3"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.max_position_embeddings = 32768;
    d.head_dim = 128;
    ModelConfig mc = read_llama_like(cfg, d);
    mc.qk_norm = true;
    read_qwen_sliding(cfg, mc);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    WeightMap m = llama_weights(mc);
    m[Slot::kQNorm] = {"model.layers.{L}.self_attn.q_norm.weight"};
    m[Slot::kKNorm] = {"model.layers.{L}.self_attn.k_norm.weight"};
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
