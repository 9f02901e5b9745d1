// Gemma: (1 + w) RMSNorms, embeddings scaled by sqrt(hidden), GELU(tanh)-gated MLP,
// tied embeddings.
#include <cmath>

#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

// Shared with Gemma2.
ModelConfig read_gemma_common(const HfConfig& cfg) {
  LlamaLikeDefaults d;
  d.tie_word_embeddings = true;
  d.head_dim = 256;
  d.max_position_embeddings = 8192;
  d.activation = "gelu_pytorch_tanh";
  ModelConfig mc = read_llama_like(cfg, d);
  // Gemma's MLP uses hidden_activation; configs that only carry the legacy hidden_act
  // ("gelu") run the tanh approximation, as transformers does.
  mc.activation =
      parse_activation(cfg.get_string({"hidden_activation"}).value_or("gelu_pytorch_tanh"), cfg,
                       "hidden_activation");
  mc.norm_weight_offset = 1.f;
  mc.embedding_scale = std::sqrt(static_cast<double>(mc.hidden_size));
  return mc;
}

ArchSpec gemma_spec() {
  ArchSpec s;
  s.family = "gemma";
  s.architectures = {"GemmaForCausalLM"};
  s.model_types = {"gemma"};
  s.map_config = [](const HfConfig& cfg) { return read_gemma_common(cfg); };
  s.map_weights = [](const ModelConfig& mc) { return llama_weights(mc); };
  return s;
}

}  // namespace tachyon::arch
