// Internal: reading tokenizer.json. The big parts (the model's vocabulary and merges)
// are read with simdjson straight from the document; the small sections become
// nlohmann JSON so that transformers' class-specific adjustments can rewrite them
// before the pipeline is built.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/json.h"
#include "tokenizer/backend.h"

namespace tachyon::tok {

struct TokenizerJson {
  TokenizerJson();
  ~TokenizerJson();
  Json normalizer, pre_tokenizer, post_processor, decoder;
  std::vector<AddedToken> added_tokens;
  Json model;  // the model section without "vocab" and "merges"
  struct Raw;  // the simdjson document holding vocab and merges
  std::unique_ptr<Raw> raw;
  std::string what;  // file name for messages
};

// Parses the text of a tokenizer.json; throws InvalidArgument naming `what`.
std::unique_ptr<TokenizerJson> parse_tokenizer_json(std::string_view text, const std::string& what);

// tokenizer_config.json: everything but added_tokens_decoder as JSON, that one (the
// bulk of some configs) read straight into tokens.
struct TokenizerConfig {
  Json json = Json::object();
  std::vector<AddedToken> added_tokens_decoder;
};
TokenizerConfig parse_tokenizer_config(std::string_view text, const std::string& what);

// Builds the pipeline from (possibly rewritten) sections.
std::unique_ptr<HfPipeline> build_pipeline(const TokenizerJson& tj);

// A tiktoken rank file ("base64-token rank" per line) as a byte-level BPE pipeline with
// pre-tokenizer `pattern` and special tokens (content, id).
std::unique_ptr<HfPipeline> build_tiktoken_pipeline(
    std::string_view ranks_text, const std::string& what, const std::string& pattern,
    const std::vector<std::pair<std::string, int32_t>>& specials);

}  // namespace tachyon::tok
