// A PEFT LoRA adapter's adapter_config.json: the rank and scaling of each module and
// which modules the adapter targets, with PEFT's matching rules (model/lora_adapter.h
// reads the weights).
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"

namespace tachyon {

// A module-name filter (target_modules / exclude_modules): a list of names, each
// matching a module whose name equals it or ends with "." + it, or one regular
// expression matched against the whole name.
struct LoraModuleFilter {
  bool present = false;  // absent or null: no filter
  std::vector<std::string> names;
  std::optional<std::regex> regex;
  bool all_linear = false;  // "all-linear": every linear layer but the output layer
};

struct LoraConfig {
  std::string source;  // the file, for messages
  int64_t r = 0;
  double alpha = 0;
  bool rslora = false;
  // PEFT's patterns in the file's order; a key matches a module when the module name is
  // the key or ends with "." + a match of the key as a regular expression.
  struct Pattern {
    std::string key;
    std::regex regex;
    double value = 0;
  };
  std::vector<Pattern> rank_pattern, alpha_pattern;
  LoraModuleFilter target, exclude;
  std::optional<std::vector<int64_t>> layers_to_transform;
  std::vector<std::regex> layers_pattern;  // each ".*\.<pattern>\.(\d+)\."
  bool fan_in_fan_out = false;

  // Whether PEFT puts an adapter on module `name`: targeted, not excluded, in
  // layers_to_transform.
  bool adapts(const std::string& name) const;
  int64_t rank_of(const std::string& name) const;
  // alpha / r, or alpha / sqrt(r) with rsLoRA, with the module's rank and alpha.
  double scaling_of(const std::string& name) const;
};

// Parses adapter_config.json's object (`text` its text, for the patterns' order);
// `source` names the file in errors. Throws InvalidArgument naming the field.
LoraConfig parse_lora_config(const std::string& text, const std::string& source);

}  // namespace tachyon
