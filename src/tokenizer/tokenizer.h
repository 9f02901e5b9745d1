// Tokenizers loaded from the files real checkpoints ship, matching Hugging Face
// (transformers' AutoTokenizer) token for token:
//   - tokenizer.json (the `tokenizers` format: BPE / WordPiece / WordLevel / Unigram models,
//     normalizers, pre-tokenizers, added tokens, post-processors, decoders), with the
//     adjustments transformers makes for the tokenizer class named in tokenizer_config.json;
//   - tokenizer.model (SentencePiece, through libsentencepiece) when there is no
//     tokenizer.json, or a tiktoken rank file (tokenizer.model / *.tiktoken);
//   - tokenizer_config.json: special tokens, add_bos_token / add_eos_token,
//     model_max_length, clean_up_tokenization_spaces, chat templates (also from a
//     chat_template.jinja sidecar).
//
// Thread safety: a loaded Tokenizer is immutable; encode/decode/lookups may run from any
// number of threads at once. An IncrementalDecoder belongs to one sequence (one thread
// at a time).
//
// Invalid UTF-8 input is decoded as Python does with errors="replace": each maximal
// invalid subsequence becomes U+FFFD before tokenization.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace tachyon {

class ChatTemplate;
namespace tok {
class Backend;
}

// Streaming detokenizer for one sequence. step() returns the text that became final
// with this token (possibly empty): never a broken UTF-8 sequence, never text a later
// token could still change (incomplete bytes, byte-fallback pieces, a pending leading
// space). flush() returns what is held back at the end. The concatenation of all
// step() results and flush() equals Tokenizer::decode() of all the ids, unless the
// stream was cut (cut()).
// Each step decodes only a small window of recent tokens.
class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;
  virtual std::string step(int32_t id) = 0;
  virtual std::string flush() = 0;
  // Whether a step emitted held text because 64 tokens in a row gave none: the tokens
  // after such a cut are decoded apart from those before it, so the text can differ from
  // the full decode where a byte-fallback or U+FFFD run crosses the cut.
  virtual bool cut() const = 0;
};

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0, end = 0;
};

struct ChatTemplateSource {
  std::string name;  // "default" for the unnamed one
  std::string source;
};

// What apply_chat_template renders: messages and the template's other inputs.
template <typename J>
struct BasicChatRequest {
  J messages = J::array();
  bool add_generation_prompt = false;
  J tools;                                   // null: none
  J documents;                               // null: none
  J extra = J::object();                     // chat_template_kwargs (enable_thinking, ...)
  std::optional<std::string> template_name;  // default: transformers' choice
  // Whether special tokens spelled in the request's values (message content, tools,
  // kwargs) are matched as special tokens, as transformers does. Off: they are text.
  bool special_tokens_in_content = false;
};
using ChatRequest = BasicChatRequest<Json>;
// Keeps the key order of objects (tools render byte for byte as transformers renders
// them when the request was parsed with nlohmann::ordered_json).
using OrderedChatRequest = BasicChatRequest<nlohmann::ordered_json>;

struct ChatEncoding {
  std::string rendered;
  std::vector<int32_t> ids;
};

class Tokenizer {
 public:
  // Loads the tokenizer of a checkpoint directory (see above for the files used).
  // Throws NotFound when none is there, InvalidArgument naming the file and field when
  // one is malformed.
  static std::unique_ptr<Tokenizer> load(const std::string& dir);
  // Builds from the text of tokenizer.json and (optionally) tokenizer_config.json.
  static std::unique_ptr<Tokenizer> from_json(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json = "{}");

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`; add_special_tokens applies the post-processor (BOS/EOS...).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // The same, but no special token is matched where it overlaps one of the `plain`
  // ranges of `text` (sorted and disjoint; InvalidArgument otherwise): their bytes are
  // tokenized as text, as Hugging Face does with split_special_tokens=True. Added tokens
  // that are not special are still matched inside a range, never across its edges.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                              std::span<const TextRange> plain) const;
  // Text of `ids`; ids outside the vocabulary are skipped, as Hugging Face does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  std::unique_ptr<IncrementalDecoder> make_incremental_decoder(bool skip_special_tokens) const;

  // One more than the largest token id (model vocabulary plus added tokens).
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of `id` ("" for an unknown id).
  std::string id_to_token(int32_t id) const;
  // Whether `id` is a special added token (skipped by skip_special_tokens).
  bool is_special(int32_t id) const;

  // Special tokens from tokenizer_config.json (or the model's own), with their ids.
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }
  const std::optional<std::string>& pad_token() const { return pad_token_; }
  const std::optional<std::string>& unk_token() const { return unk_token_; }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  std::optional<int64_t> model_max_length() const { return model_max_length_; }

  // Chat templates: the default one (if any) and all named ones. chat_template.jinja
  // and additional_chat_templates/*.jinja take priority over tokenizer_config.json.
  std::optional<std::string> chat_template(std::string_view name = "default") const;
  const std::vector<ChatTemplateSource>& chat_templates() const { return chat_templates_; }

  // transformers' apply_chat_template(tokenize=True): renders the request with the chat
  // template (the named one; else "tool_use" when tools are given and it exists; else
  // "default") and this tokenizer's bos/eos/pad/unk tokens, then encodes the text with
  // add_special_tokens=false. Special tokens are matched only in the template's own text
  // unless the request sets special_tokens_in_content (see ChatTemplate::render_marked). Throws
  // InvalidArgument when there is no template or the template fails (raise_exception, syntax
  // errors, limits).
  ChatEncoding apply_chat_template(const ChatRequest& request) const;
  ChatEncoding apply_chat_template(const OrderedChatRequest& request) const;

 private:
  template <typename J>
  ChatEncoding apply_chat_template_impl(const BasicChatRequest<J>& request) const;
  std::shared_ptr<const ChatTemplate> compiled_template(const std::string& name) const;
  Tokenizer();
  friend struct TokenizerBuilder;
  std::unique_ptr<tok::Backend> backend_;
  bool clean_up_tokenization_spaces_ = false;
  std::optional<std::string> bos_token_, eos_token_, pad_token_, unk_token_;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_, unk_id_;
  std::optional<int64_t> model_max_length_;
  std::vector<ChatTemplateSource> chat_templates_;
  mutable std::mutex chat_mu_;
  mutable std::map<std::string, std::shared_ptr<const ChatTemplate>> compiled_;
};

}  // namespace tachyon
