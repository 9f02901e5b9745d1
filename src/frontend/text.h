// What the output processor needs of a tokenizer: streaming detokenization (for text
// pieces and stop strings) and the end-of-sequence ids. Kept this small so that tests
// can supply a toy one; make_text_tokenizer wraps a loaded Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tachyon {

// Turns a growing token sequence into text pieces, each complete UTF-8.
class IncrementalDetokenizer {
 public:
  virtual ~IncrementalDetokenizer() = default;
  // Adds one token; returns the text that became final (possibly empty).
  virtual std::string add(int32_t token) = 0;
  // The text still held back at the end of the sequence.
  virtual std::string flush() = 0;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual std::unique_ptr<IncrementalDetokenizer> make_incremental_decoder(
      bool skip_special_tokens) const = 0;
  // Ids that end a sequence (may be empty).
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  // The tokens as bytes of text, for grammar-constrained decoding: the vocabulary's
  // size (0: not known, constraints are refused) and a token's bytes (nullopt: a special
  // token, never text).
  virtual int32_t vocab_size() const { return 0; }
  virtual std::optional<std::string> token_bytes(int32_t /*id*/) const { return std::nullopt; }
};

// Finds stop strings in streamed text. Text that might be the beginning of a stop
// string is held back until it is known not to be; the stop string itself and all
// after it are never emitted.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;      // text safe to send now
    bool stopped = false;  // a stop string was found (emit ends just before it)
    std::string matched;   // the stop string found
  };
  Result push(std::string_view piece);
  // At the end of the sequence (no stop found): the held-back text.
  std::string flush();
  bool active() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

// Whether a tokenizer spells bytes with GPT-2's byte-to-unicode alphabet (byte-level BPE).
bool is_byte_level(const Tokenizer& tokenizer);
// The bytes of text a token stands for: byte-level BPE's alphabet decoded, SentencePiece's
// U+2581 as a space and its <0xHH> byte fallback as the byte; a special token's content.
std::string token_text_bytes(const Tokenizer& tokenizer, int32_t id, bool byte_level);

// A loaded tokenizer as a TextTokenizer: its streaming decoder gives the text pieces;
// eos_ids (or, when empty, the tokenizer's EOS) end sequences.
std::shared_ptr<const TextTokenizer> make_text_tokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                                         std::vector<int32_t> eos_ids = {});

}  // namespace tachyon
