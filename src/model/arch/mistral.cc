// Mistral: Llama with a sliding attention window on every layer.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec mistral_spec() {
  ArchSpec s;
  s.family = "mistral";
  s.architectures = {"MistralForCausalLM"};
  s.model_types = {"mistral"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    d.max_position_embeddings = 4096 * 32;
    ModelConfig mc = read_llama_like(cfg, d);
    read_sliding_window(cfg, mc, 4096);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) { return llama_weights(mc); };
  return s;
}

}  // namespace tachyon::arch
