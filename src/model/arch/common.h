// Helpers shared by the family mappings in src/model/arch/.
#pragma once

#include <string>

#include "model/config.h"
#include "model/hf_config.h"
#include "model/registry.h"
#include "model/weights.h"

namespace tachyon::arch {

// Defaults of a Llama-like config class for fields config.json may omit.
struct LlamaLikeDefaults {
  double norm_eps = 1e-6;
  double rope_theta = 10000.0;
  const char* activation = "silu";
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  int64_t max_position_embeddings = 2048;
  double partial_rotary_factor = 1.0;
  int64_t head_dim = 0;  // 0: hidden / heads
};

// Reads the Llama-family fields: sizes, RMSNorm eps, activation, attention/mlp bias,
// rope (both spellings), special tokens, dtype, tie_word_embeddings.
ModelConfig read_llama_like(const HfConfig& cfg, const LlamaLikeDefaults& d);

// sliding_window (null or absent -> none) applied to every layer unless layer_types
// says otherwise.
void read_sliding_window(const HfConfig& cfg, ModelConfig& mc, int64_t default_window);

// Qwen2/Qwen3: use_sliding_window + max_window_layers (or layer_types).
void read_qwen_sliding(const HfConfig& cfg, ModelConfig& mc);

// The Llama weight names under `prefix` ("model."): embeddings, q/k/v/o, gate/up/down,
// input/post-attention norms, final norm, lm_head. Biases per the config flags.
WeightMap llama_weights(const ModelConfig& mc, const std::string& prefix = "model.");

// The per-layer tensors of Megatron-style blocks (Bloom, GPT-NeoX, ChatGLM-6B) under
// `layer` ("transformer.h.{L}."): input_layernorm, <attention>.query_key_value (rows per
// head, reordered at load), <attention>.dense, post_attention_layernorm,
// mlp.dense_h_to_4h and mlp.dense_4h_to_h, with the norm and MLP biases, and the
// attention biases when attention_bias.
void add_megatron_layer(WeightMap& m, const std::string& layer, const std::string& attention,
                        bool attention_bias);

// Sets per-layer flags to one value.
inline std::vector<uint8_t> all_layers(const ModelConfig& mc, bool v) {
  return std::vector<uint8_t>(static_cast<size_t>(mc.layer_num), v ? 1 : 0);
}

}  // namespace tachyon::arch
