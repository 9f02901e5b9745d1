// Random checkpoints of any shape (for benchmarks and round-trip tests): every tensor
// an architecture's weight mapping names, filled with scaled random values so that
// activations stay in a sane range (matrices ~ N(0, 0.02^2), norm scales ~ 1), drawn from
// NormalStream (model/normal_stream.h), the generator the conformance fixtures use too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/weights.h"

namespace tachyon {

struct RandomTensorSpec {
  std::string name;
  Shape shape;  // as stored in the checkpoint
  enum Kind { kMatrix, kNormScale, kBias } kind = kMatrix;
};

// The tensors a checkpoint for `cfg` needs under `map` (tied lm_head omitted).
std::vector<RandomTensorSpec> plan_random_tensors(const ModelConfig& cfg, const WeightMap& map);

struct RandomModelOptions {
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  uint64_t shard_bytes = uint64_t{2} << 30;  // larger checkpoints are sharded
};

// Reads config.json, maps it through the registry, and writes out_dir/config.json
// (with the dtype recorded) plus model.safetensors or shards with an index.
// Returns the number of parameters written.
uint64_t write_random_model(const std::string& config_path, const std::string& out_dir,
                            const RandomModelOptions& opts);

// Writes a random PEFT LoRA adapter for the model of config.json into out_dir
// (adapter_config.json, adapter_model.safetensors): rank `rank`, lora_alpha 2 * rank, on
// every decoder linear of every layer (q/k/v, o, gate/up, down as the checkpoint names
// them), A and B ~ N(0, 0.02^2) in opts.dtype (B nonzero: the adapter changes the
// outputs). Returns the number of parameters written.
uint64_t write_random_lora(const std::string& config_path, const std::string& out_dir, int32_t rank,
                           const RandomModelOptions& opts);

}  // namespace tachyon
