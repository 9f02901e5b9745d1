// What the engine needs of a tokenizer: streaming detokenization (for text pieces and
// stop strings) and the end-of-sequence ids. Kept this small so that the engine runs
// without a tokenizer (token ids only) and tests can supply a toy one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace tachyon
