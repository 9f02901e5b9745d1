// The stages of a Hugging Face `tokenizers` pipeline (internal to src/tokenizer):
//   normalizer -> pre-tokenizer -> model -> post-processor, and the decoder.
// Each stage is built from its tokenizer.json section by a make_* factory that throws
// InvalidArgument naming the offending field (e.g. "pre_tokenizer.pretokenizers[0].behavior").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace tachyon::tok {

// One pre-token: its text and whether it begins at offset 0 of the original input
// (Metaspace's prepend_scheme "first" prepends only there).
struct Piece {
  std::string text;
  bool at_origin = false;
};
using Pieces = std::vector<Piece>;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites valid UTF-8 `s` in place.
  virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) each piece; empty pieces are dropped afterwards.
  virtual void pre_tokenize(Pieces& pieces) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-token (non-empty, valid UTF-8).
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The token string of `id`, or nullopt for an id outside the vocabulary.
  virtual std::optional<std::string_view> id_to_token(int32_t id) const = 0;
  // One more than the largest id of the model's vocabulary.
  virtual int32_t vocab_size() const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens of a single sequence (only called when they are asked for).
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Transforms the token strings; the decoded text is their concatenation.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& path);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& path);
std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& path);
std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& path);

// Python's str.replace-style cleanup transformers applies when
// clean_up_tokenization_spaces is set (and the WordPiece decoder's cleanup).
// `wordpiece` adds the rule " do not" -> " don't" of the WordPiece/CTC decoders.
std::string cleanup_tokenization_spaces(std::string_view text, bool wordpiece = false);

// ---- JSON field access with errors naming the field --------------------------------
const Json& field(const Json& j, std::string_view key, const std::string& path);
std::string get_string(const Json& j, std::string_view key, const std::string& path);
std::optional<std::string> get_opt_string(const Json& j, std::string_view key,
                                          const std::string& path);
bool get_bool(const Json& j, std::string_view key, bool fallback, const std::string& path);
int64_t get_int(const Json& j, std::string_view key, int64_t fallback, const std::string& path);
// A single Unicode character given as a one-character string.
char32_t get_char(const Json& j, std::string_view key, char32_t fallback, const std::string& path);
std::string type_of(const Json& j, const std::string& path);

}  // namespace tachyon::tok
