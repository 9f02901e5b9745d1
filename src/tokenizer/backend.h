// Internal: the engines behind Tokenizer. HfPipeline runs a tokenizer.json pipeline;
// the SentencePiece backend wraps libsentencepiece.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pipeline.h"
#include "tokenizer/string_map.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::tok {

// A text cut into regions: its plain ranges, where no special token is matched, and the
// text between them. A token is matched only inside one region.
class Regions {
 public:
  // Throws InvalidArgument unless the ranges are sorted, disjoint and inside the text.
  Regions(std::span<const TextRange> plain, size_t size);
  struct Region {
    size_t begin, end;
    bool plain;
  };
  // The region that holds byte `pos` (< size).
  Region at(size_t pos) const;

 private:
  std::span<const TextRange> plain_;
  size_t size_;
};

// utf8::sanitize of a text and its ranges (each range sanitized on its own when the text
// is not valid UTF-8, so that they still cover the same characters).
void sanitize_ranges(std::string_view input, std::span<const TextRange> plain, std::string& text,
                     std::vector<TextRange>& ranges);

class Backend {
 public:
  virtual ~Backend() = default;
  // Token ids of `text`; no special token is matched across or inside a `plain` range.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                                      std::span<const TextRange> plain) const = 0;
  // Hugging Face's decode (before transformers' clean-up of spaces).
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // Adds a special token that is not in the vocabulary yet (transformers adds the
  // special tokens named in tokenizer_config.json); returns its id.
  virtual int32_t add_special_token(std::string_view content) = 0;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = true;
};

// Added tokens, matched in the text before the model runs: leftmost-longest, the
// non-normalized ones on the raw text, the normalized ones on normalized text.
class AddedVocabulary {
 public:
  // Adds or replaces (same content or same id) a token.
  void add(AddedToken token);
  // Builds the matchers; normalized tokens are matched in their normalized form.
  void build(const Normalizer* normalizer);

  struct Segment {
    size_t begin, end;
    int32_t id;  // -1: text to tokenize
  };
  // Splits `text` by the tokens of one pass (normalized or not). No token is matched
  // across the edge of a `plain` range, and no special one inside it (its bytes stay
  // text, as tokenizers' encode_special_tokens has them); none at all inside it with
  // `all_plain` (transformers' slow tokenizers with split_special_tokens).
  void split(std::string_view text, bool normalized_pass, std::vector<Segment>& out,
             std::span<const TextRange> plain = {}, bool all_plain = false) const;
  bool any_normalized() const { return any_normalized_; }

  std::optional<int32_t> find(std::string_view content) const { return by_content_.find(content); }
  const AddedToken* by_id(int32_t id) const;
  bool empty() const { return tokens_.empty(); }
  int32_t max_id() const;

 private:
  struct Trie {
    std::vector<std::vector<std::pair<uint8_t, uint32_t>>> children{{}};
    std::vector<int32_t> token{-1};  // index into tokens_
    bool first_byte[256] = {};
    void insert(std::string_view s, int32_t index);
    // Longest token starting at `pos`; returns its index and sets `len`, or -1.
    int32_t longest(std::string_view text, size_t pos, size_t& len) const;
  };
  std::vector<AddedToken> tokens_;
  StringIdMap by_content_;            // content -> id
  std::vector<int32_t> index_of_id_;  // id -> index into tokens_, -1 (built by build())
  std::unordered_map<int32_t, size_t> slot_of_id_;
  Trie raw_, normalized_;
  bool any_raw_ = false, any_normalized_ = false;
};

// A tokenizer.json pipeline.
class HfPipeline : public Backend {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                              std::span<const TextRange> plain) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;
  int32_t add_special_token(std::string_view content) override;

  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
};

std::unique_ptr<Backend> make_sentencepiece_backend(const std::string& model_path, bool add_bos,
                                                    bool add_eos,
                                                    const std::vector<std::string>& specials);
// ChatGLM2 / ChatGLM3's tokenizer (tokenizer_class ChatGLMTokenizer): SentencePiece plus
// nine special tokens numbered after its vocabulary, [gMASK] sop prepended
// (chatglm_backend.cc). `added`: tokenizer_config.json's added_tokens_decoder.
std::unique_ptr<Backend> make_chatglm_backend(const std::string& model_path,
                                              const std::vector<AddedToken>& added);

// The first ChatGLM-6B's tokenizer (ice_text.model, chatglm6b_backend.cc), from
// tokenizer_config.json as ChatGLMTokenizer reads it (its defaults when absent).
struct ChatGLM6BOptions {
  int32_t num_image_tokens = 20000;  // the id offset of the SentencePiece pieces
  bool remove_space = false;
  std::string bos_token = "<sop>";
  std::string gmask_token = "[gMASK]";
  std::optional<std::string> pad_token = "<pad>";
  // The special tokens the text is split on: bos, eos, unk, pad, mask and the
  // additional ones. A plain string strips the whitespace on both sides.
  struct Special {
    std::string content;
    bool lstrip = true;
    bool rstrip = true;
  };
  std::vector<Special> specials;
};
std::unique_ptr<Backend> make_chatglm6b_backend(const std::string& model_path,
                                                const ChatGLM6BOptions& options);

}  // namespace tachyon::tok
