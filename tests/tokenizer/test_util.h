// Shared helpers for the tokenizer tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::testing {

// The six reference tokenizers fetched by scripts/fetch_tokenizers.sh.
inline const std::vector<std::string>& reference_names() {
  static const std::vector<std::string> names = {"llama3", "qwen3", "gemma3",
                                                 "llama2", "gpt4o", "deepseek_v3"};
  return names;
}

inline std::string reference_dir(const std::string& name) {
  return std::string(TACHYON_BINARY_DIR) + "/tokenizers/" + name;
}

// Loads a reference tokenizer, or fails the test telling how to fetch it.
inline std::unique_ptr<Tokenizer> load_reference(const std::string& name) {
  const std::string dir = reference_dir(name);
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    ADD_FAILURE() << "reference tokenizer '" << name << "' is missing from " << dir
                  << ": run `scripts/fetch_tokenizers.sh " << TACHYON_BINARY_DIR
                  << "/tokenizers` (scripts/test.sh does it)";
    return nullptr;
  }
  return Tokenizer::load(dir);
}

inline std::string kjv_dir() {
  return std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat";
}

inline std::vector<int32_t> to_ids(const Json& j) {
  std::vector<int32_t> v;
  for (const auto& x : j) v.push_back(x.get<int32_t>());
  return v;
}

}  // namespace tachyon::testing
