// The architecture registry: each family contributes an ArchSpec (its config mapping
// and weight mapping); a checkpoint is matched by architectures[0], then model_type,
// or by an explicit override (--model-type).
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/hf_config.h"
#include "model/weights.h"

namespace tachyon {

struct ArchSpec {
  std::string family;  // "llama"
  // Hugging Face class names ("LlamaForCausalLM") and config.json model_type values
  // ("llama"). A family with neither is reached only by name (--model-type): a variant
  // whose config cannot be told apart from another family's.
  std::vector<std::string> architectures;
  std::vector<std::string> model_types;
  ModelConfig (*map_config)(const HfConfig& cfg) = nullptr;
  WeightMap (*map_weights)(const ModelConfig& cfg) = nullptr;
  // A variant that carries another family's names (variant_of) and is told apart by
  // its config's fields: a config matched to that family comes here when
  // is_variant(cfg).
  std::string variant_of;
  bool (*is_variant)(const HfConfig& cfg) = nullptr;
};

// Every registered family.
const std::vector<ArchSpec>& arch_registry();

// Picks the family for a config. `override_type` (may be empty) matches a family
// name, an architecture name or a model_type, and wins over the config's own fields;
// the family found then gives way to a variant of it that claims the config.
// Unknown -> InvalidArgument listing the supported architectures.
const ArchSpec& find_arch(const HfConfig& cfg, const std::string& override_type);

// The supported architecture names, comma-separated (for messages and help).
std::string supported_architectures();

// Maps a config.json (+ generation_config.json next to it, when present) through the
// registry into a validated ModelConfig, with its quantization_config (or, without one,
// the quantize_config.json at quantize_config_path when present), and its per-layer
// shapes from config.json or the file at sparse_config_path (read_layer_shapes).
ModelConfig map_model_config(const HfConfig& cfg, const std::string& override_type,
                             const std::string& generation_config_path = "",
                             const std::string& quantize_config_path = "",
                             const std::string& sparse_config_path = "");

}  // namespace tachyon
