// Llama (and Aquila / Aquila2, which are Llama): RMSNorm, SiLU-gated MLP, rotary.
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec llama_spec() {
  ArchSpec s;
  s.family = "llama";
  s.architectures = {"LlamaForCausalLM", "AquilaForCausalLM", "AquilaModel", "Aquila2ForCausalLM"};
  s.model_types = {"llama", "aquila", "aquila2"};
  s.map_config = [](const HfConfig& cfg) {
    LlamaLikeDefaults d;
    return read_llama_like(cfg, d);
  };
  s.map_weights = [](const ModelConfig& mc) { return llama_weights(mc); };
  return s;
}

}  // namespace tachyon::arch
