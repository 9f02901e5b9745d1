// What the round-trip properties expect of each reference tokenizer and the bundled one,
// shared by the round-trip tests and the tokenizer fuzz target (no gtest here).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "core/json.h"
#include "core/mmap.h"
#include "core/utf8.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tachyon::testing {

// Loads a tokenizer by its test name ("kjv": the bundled model's; else one of the
// reference tokenizers in refs_dir/<name>), as the round-trip properties take it; nullptr
// when a reference tokenizer is not there.
inline std::unique_ptr<Tokenizer> load_roundtrip_tokenizer(const std::string& name,
                                                           const std::string& kjv_dir,
                                                           const std::string& refs_dir) {
  if (name == "kjv") return Tokenizer::load(kjv_dir);
  const std::string dir = refs_dir + "/" + name;
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
  if (name == "deepseek_v3") {
    // As transformers loads it (LlamaTokenizerFast) characters outside the vocabulary
    // are dropped; the file's own byte-level pipeline round-trips.
    Json config = load_json_file(dir + "/tokenizer_config.json");
    config.erase("tokenizer_class");
    return Tokenizer::from_json(read_file(dir + "/tokenizer.json"), config.dump());
  }
  return Tokenizer::load(dir);
}

// What decode(encode(x)) gives for each tokenizer: its normalization of x.
inline std::string expected_roundtrip(const std::string& name, const std::string& x) {
  std::string s = utf8::sanitize(x);
  if (name == "qwen3") return tok::unicode::normalize(s, tok::unicode::Form::kNFC);
  // tokenizer_config.json asks for transformers' clean-up of spaces (" ," -> ",", ...).
  if (name == "llama3") return tok::cleanup_tokenization_spaces(s);
  if (name == "llama2" || name == "kjv") {
    // LlamaTokenizer: a leading space merges with the prefix space and is stripped.
    if (!s.empty() && s[0] == ' ') s.erase(0, 1);
  }
  return s;
}

}  // namespace tachyon::testing
