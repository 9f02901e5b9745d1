// A toy tokenizer for the output processor's tests.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "frontend/text.h"

namespace tachyon::testing {

// Token v decodes to pieces[v]; a piece may be an incomplete UTF-8 sequence, held back
// until complete. Special tokens (ids in `special`) are dropped when skipping them.
class FakeTokenizer : public TextTokenizer {
 public:
  FakeTokenizer(std::vector<std::string> pieces, std::vector<int32_t> special,
                std::vector<int32_t> eos)
      : pieces_(std::move(pieces)), special_(std::move(special)), eos_(std::move(eos)) {}

  // vocab pieces: letters and spaces, a few multi-byte fragments.
  static std::shared_ptr<FakeTokenizer> standard(int32_t vocab, int32_t eos) {
    std::vector<std::string> p(static_cast<size_t>(vocab));
    const char* base[] = {"a",  "b",  "c",    "d", "e",  " ", "x", "yz",
                          "ab", "ba", " the", "!", "\n", "o", "k"};
    for (int32_t v = 0; v < vocab; ++v) p[static_cast<size_t>(v)] = base[v % 15];
    if (vocab > 62) {
      p[60] = "\xE2";  // with 61 and 62: the euro sign, over three tokens
      p[61] = "\x82";
      p[62] = "\xAC";
    }
    p[static_cast<size_t>(eos)] = "</s>";
    return std::make_shared<FakeTokenizer>(p, std::vector<int32_t>{eos}, std::vector<int32_t>{eos});
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string s;
    for (int32_t t : ids) {
      if (skip_special && is_special(t)) continue;
      s += pieces_.at(static_cast<size_t>(t));
    }
    return s;
  }

  std::unique_ptr<IncrementalDetokenizer> make_incremental_decoder(bool skip) const override {
    return std::make_unique<Decoder>(this, skip);
  }
  std::vector<int32_t> eos_token_ids() const override { return eos_; }

 private:
  bool is_special(int32_t t) const {
    return std::find(special_.begin(), special_.end(), t) != special_.end();
  }

  class Decoder : public IncrementalDetokenizer {
   public:
    Decoder(const FakeTokenizer* tok, bool skip) : tok_(tok), skip_(skip) {}
    std::string add(int32_t token) override {
      if (!(skip_ && tok_->is_special(token)))
        pending_ += tok_->pieces_.at(static_cast<size_t>(token));
      // Emit up to the last complete UTF-8 character.
      size_t end = pending_.size();
      size_t i = end;
      while (i > 0 && (static_cast<unsigned char>(pending_[i - 1]) & 0xC0) == 0x80) --i;
      if (i > 0) {
        const unsigned char lead = static_cast<unsigned char>(pending_[i - 1]);
        const size_t len = lead < 0x80    ? 1
                           : lead >= 0xF0 ? 4
                           : lead >= 0xE0 ? 3
                           : lead >= 0xC0 ? 2
                                          : 1;
        if (end - (i - 1) < len) end = i - 1;
      }
      std::string out = pending_.substr(0, end);
      pending_.erase(0, end);
      return out;
    }
    std::string flush() override {
      std::string out;
      out.swap(pending_);
      return out;
    }

   private:
    const FakeTokenizer* tok_;
    bool skip_;
    std::string pending_;
  };

  std::vector<std::string> pieces_;
  std::vector<int32_t> special_;
  std::vector<int32_t> eos_;
};

}  // namespace tachyon::testing
