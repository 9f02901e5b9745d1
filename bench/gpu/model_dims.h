// The dimensions the GPU benchmarks build their single-op shapes from, read from a Hugging
// Face config.json (a Llama-style decoder: hidden, MLP, query and KV heads, head_dim,
// vocabulary). Shared by tachyon_gpu_bench and tachyon_kernel_bench.
#pragma once

#include <cstdint>

#include "core/json.h"

namespace tachyon::bench {

struct ModelDims {
  int64_t hidden = 4096, inter = 14336, heads = 32, kv_heads = 8, head_dim = 128, vocab = 128256;
};

inline ModelDims model_dims(const Json& config) {
  ModelDims d;
  d.hidden = config["hidden_size"].get<int64_t>();
  d.inter = config["intermediate_size"].get<int64_t>();
  d.heads = config["num_attention_heads"].get<int64_t>();
  d.kv_heads = config.contains("num_key_value_heads") ? config["num_key_value_heads"].get<int64_t>()
                                                      : d.heads;
  d.head_dim = config.contains("head_dim") ? config["head_dim"].get<int64_t>() : d.hidden / d.heads;
  d.vocab = config["vocab_size"].get<int64_t>();
  return d;
}

}  // namespace tachyon::bench
