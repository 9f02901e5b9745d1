// Loading a Hugging Face model folder through the public path: config.json ->
// registry (config mapping) -> Checkpoint -> weight mapping -> decoder.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "model/decoder.h"

namespace tachyon {

struct LoadOptions {
  std::string model_type;      // override of architectures[0] / model_type (--model-type)
  std::optional<DType> dtype;  // compute dtype override (reserved; the CPU computes in f32)
  Device device;               // where to run (CPU for now)
};

// The mapped config of a model folder (config.json + generation_config.json).
ModelConfig load_model_config(const std::string& dir, const LoadOptions& opts = {});

// Loads a model folder. Errors: NotFound (no config.json, no weights, missing tensor),
// InvalidArgument (bad config, unsupported architecture, wrong tensor shape).
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts = {});

}  // namespace tachyon
