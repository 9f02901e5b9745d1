// Streaming detokenization with a sliding window. The window holds the ids from
// `prefix_` on; decode(window[0, read_)) is text already emitted. Each step decodes the
// window and emits what lies beyond that text, unless the new text ends in U+FFFD (an
// incomplete UTF-8 sequence or byte-fallback piece may still complete) or could still
// change under transformers' clean-up of spaces. After emitting, the window start moves
// up to the previous read point, so a decode covers only a few tokens and the
// context-dependent rules of the decoders (the first piece's stripped space,
// byte-fallback runs) see the same neighbours as in the full decode.
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
namespace {

// After this many tokens without output, pending text is emitted anyway, so that a
// step never decodes more than this many tokens. Only a run of more than this many
// byte-fallback pieces or U+FFFD tokens can then stream differently from the full decode
// (which turns every byte of an invalid run into U+FFFD, however long): the stream cuts
// there, and the tokens after the cut are decoded apart from those before it.
constexpr size_t kMaxPending = 64;

// "<0xXX>": a byte-fallback piece. The ByteFallback decoder decides on a whole run of
// them at once, so none of the run is final before a token of another kind arrives (a
// skipped special token is not one).
bool is_byte_piece(const std::string& t) {
  auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
  };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4]);
}

class WindowDecoder : public IncrementalDecoder {
 public:
  WindowDecoder(const Tokenizer& t, bool skip) : t_(t), skip_(skip) {}

  std::string step(int32_t id) override {
    window_.push_back(id);
    const bool may_wait = window_.size() - read_ < kMaxPending;
    // A special token that decode skips adds no text, and a byte-fallback run goes on
    // across it in the full decode (the decoders never see it): nothing is final yet.
    if (may_wait && (is_byte_piece(t_.id_to_token(id)) || (skip_ && t_.is_special(id)))) return "";
    std::string full = t_.decode(window_, skip_);
    if (may_wait && ends_with_replacement(full)) return "";
    const size_t hold = cleanup_hold(full);
    size_t start = prefix_text_.size() + emitted_;
    // Only after a forced emission can the context text fail to be a prefix of the
    // window's text; never cut a character then.
    while (start < full.size() && (static_cast<unsigned char>(full[start]) & 0xC0) == 0x80) ++start;
    const size_t avail = full.size() - std::min(hold, full.size());
    std::string out = avail > start ? full.substr(start, avail - start) : "";
    emitted_ += out.size();
    if (hold > 0) return out;
    if (!may_wait) {
      // Forced out: what follows starts at a hard cut, so that no text already out is
      // decoded again with different neighbours (a byte-fallback run or a U+FFFD token
      // read anew from the middle would give other text, out of order). The context is
      // the last token where its text ends cleanly, else nothing.
      cut_ = true;
      const int32_t last = window_.back();
      std::string last_text = t_.decode(std::span<const int32_t>(&last, 1), skip_);
      window_.clear();
      prefix_text_.clear();
      if (!is_byte_piece(t_.id_to_token(last)) && !last_text.empty() &&
          !ends_with_replacement(last_text)) {
        window_.push_back(last);
        prefix_text_ = std::move(last_text);
      }
      read_ = window_.size();
      emitted_ = 0;
      return out;
    }
    // Everything decoded so far is out: the new context is the tokens since the last
    // read point, unless they decode to nothing (skipped specials, a lone stripped
    // space), which would lose the context the decoders need.
    std::span<const int32_t> tail(window_.data() + read_, window_.size() - read_);
    std::string tail_text = t_.decode(tail, skip_);
    if (!tail_text.empty()) {
      window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(read_));
      prefix_text_ = std::move(tail_text);
    } else {
      prefix_text_ = std::move(full);
    }
    read_ = window_.size();
    emitted_ = 0;
    return out;
  }

  bool cut() const override { return cut_; }

  std::string flush() override {
    std::string full = t_.decode(window_, skip_);
    size_t start = prefix_text_.size() + emitted_;
    while (start < full.size() && (static_cast<unsigned char>(full[start]) & 0xC0) == 0x80) ++start;
    std::string rest = full.size() > start ? full.substr(start) : "";
    window_.clear();
    read_ = 0;
    emitted_ = 0;
    prefix_text_.clear();
    return rest;
  }

 private:
  static bool ends_with_replacement(const std::string& s) {
    return s.size() >= 3 && s.compare(s.size() - 3, 3, utf8::kReplacementUtf8) == 0;
  }
  // Bytes at the end of `s` that a later token could turn into one of the patterns of
  // clean_up_tokenization_spaces (only when the tokenizer applies it).
  size_t cleanup_hold(const std::string& s) const {
    if (!cleanup_) return 0;
    static const char* kPatterns[] = {" .",   " ?",  " !",  " ,",   " ' ",
                                      " n't", " 'm", " 's", " 've", " 're"};
    size_t best = 0;
    for (const char* p : kPatterns) {
      std::string_view pat(p);
      for (size_t k = pat.size() - 1; k > best; --k) {
        if (s.size() >= k && s.compare(s.size() - k, k, pat.substr(0, k)) == 0) {
          best = k;
          break;
        }
      }
    }
    return best;
  }

 public:
  bool cleanup_ = false;

 private:
  const Tokenizer& t_;
  bool skip_;
  std::vector<int32_t> window_;
  size_t read_ = 0;
  std::string prefix_text_;
  size_t emitted_ = 0;  // bytes of the window's text past prefix_text_ already returned
  bool cut_ = false;    // a forced emission cut the stream (cut())
};

}  // namespace

std::unique_ptr<IncrementalDecoder> Tokenizer::make_incremental_decoder(
    bool skip_special_tokens) const {
  auto d = std::make_unique<WindowDecoder>(*this, skip_special_tokens);
  d->cleanup_ = clean_up_tokenization_spaces_;
  return d;
}

}  // namespace tachyon
