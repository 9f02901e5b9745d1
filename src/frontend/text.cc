#include "frontend/text.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace tachyon {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(
      std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }),
      stops_.end());
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view piece) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  if (stops_.empty()) {
    r.emit.assign(piece);
    return r;
  }
  // Any stop string that occurs starts inside the held text or the new piece: emitted
  // text never ends with a prefix of a stop string.
  std::string text = held_;
  text.append(piece);
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = text.find(s);
    if (at < first) {
      first = at;
      r.matched = s;
    }
  }
  if (first != std::string::npos) {
    r.emit = text.substr(0, first);
    r.stopped = stopped_ = true;
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t most = std::min(text.size(), s.size() - 1);
    for (size_t len = most; len > hold; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  r.emit = text.substr(0, text.size() - hold);
  held_ = text.substr(text.size() - hold);
  return r;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

namespace {

// GPT-2's byte-to-unicode alphabet, inverted: token strings of byte-level BPE
// tokenizers spell each byte with one of these code points.
const std::unordered_map<uint32_t, uint8_t>& byte_decoder() {
  static const std::unordered_map<uint32_t, uint8_t> kMap = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      m[printable ? b : 256 + n++] = static_cast<uint8_t>(b);
    }
    return m;
  }();
  return kMap;
}

// Decodes UTF-8 into code points; false on invalid input.
bool code_points(std::string_view s, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80             ? 1
               : (c & 0xE0) == 0xC0 ? 2
               : (c & 0xF0) == 0xE0 ? 3
               : (c & 0xF8) == 0xF0 ? 4
                                    : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out->push_back(cp);
    i += n;
  }
  return true;
}

class Detokenizer : public IncrementalDetokenizer {
 public:
  explicit Detokenizer(std::unique_ptr<IncrementalDecoder> d) : d_(std::move(d)) {}
  std::string add(int32_t token) override { return d_->step(token); }
  std::string flush() override { return d_->flush(); }

 private:
  std::unique_ptr<IncrementalDecoder> d_;
};

class TokenizerView : public TextTokenizer {
 public:
  TokenizerView(std::shared_ptr<const Tokenizer> t, std::vector<int32_t> eos)
      : t_(std::move(t)), eos_(std::move(eos)) {
    if (eos_.empty() && t_->eos_id()) eos_.push_back(*t_->eos_id());
  }
  std::unique_ptr<IncrementalDetokenizer> make_incremental_decoder(bool skip) const override {
    return std::make_unique<Detokenizer>(t_->make_incremental_decoder(skip));
  }
  std::vector<int32_t> eos_token_ids() const override { return eos_; }
  int32_t vocab_size() const override { return t_->vocab_size(); }
  std::optional<std::string> token_bytes(int32_t id) const override {
    if (id < 0 || id >= t_->vocab_size() || t_->is_special(id)) return std::nullopt;
    return token_text_bytes(*t_, id, byte_level_);
  }

 private:
  std::shared_ptr<const Tokenizer> t_;
  std::vector<int32_t> eos_;
  bool byte_level_ = is_byte_level(*t_);
};

}  // namespace

bool is_byte_level(const Tokenizer& tokenizer) {
  for (int32_t id : tokenizer.encode(" a b", false))
    if (tokenizer.id_to_token(id).find("\xC4\xA0") != std::string::npos) return true;
  return false;
}

std::string token_text_bytes(const Tokenizer& tokenizer, int32_t id, bool byte_level) {
  std::string t = tokenizer.id_to_token(id);
  if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>')  // SentencePiece byte fallback
    return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
  if (tokenizer.is_special(id)) return t;
  if (byte_level) {
    std::vector<uint32_t> cps;
    std::string out;
    const auto& dec = byte_decoder();
    if (code_points(t, &cps)) {
      bool ok = true;
      for (uint32_t cp : cps) {
        auto it = dec.find(cp);
        if (it == dec.end()) {
          ok = false;
          break;
        }
        out += static_cast<char>(it->second);
      }
      if (ok) return out;
    }
    return tokenizer.decode(std::vector<int32_t>{id}, false);
  }
  // SentencePiece: U+2581 stands for a space.
  static const std::string kSpace = "\xE2\x96\x81";
  if (t.find(kSpace) != std::string::npos) {
    std::string out;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += t[i++];
      }
    }
    return out;
  }
  return t.empty() ? tokenizer.decode(std::vector<int32_t>{id}, false) : t;
}

std::shared_ptr<const TextTokenizer> make_text_tokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                                         std::vector<int32_t> eos_ids) {
  TACHYON_CHECK(tokenizer != nullptr);
  return std::make_shared<TokenizerView>(std::move(tokenizer), std::move(eos_ids));
}

}  // namespace tachyon
