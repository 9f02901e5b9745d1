// Qwen2: Llama with q/k/v biases and an optional sliding window on upper layers.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec qwen2_spec() {
  ArchSpec s;
  s.family = "qwen2";
  s.architectures = {"Qwen2ForCausalLM"};
  s.model_types = {"qwen2"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.max_position_embeddings = 32768;
    ModelConfig mc = read_llama_like(cfg, d);
    mc.qkv_bias = true;  // always present in Qwen2 attention
    mc.o_bias = false;
    read_qwen_sliding(cfg, mc);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) { return llama_weights(mc); };
  return s;
}

}  // namespace tachyon::arch
