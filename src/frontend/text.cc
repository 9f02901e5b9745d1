#include "frontend/text.h"

#include <algorithm>

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

 private:
  std::shared_ptr<const Tokenizer> t_;
  std::vector<int32_t> eos_;
};

}  // namespace

std::shared_ptr<const TextTokenizer> make_text_tokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                                         std::vector<int32_t> eos_ids) {
  TACHYON_CHECK(tokenizer != nullptr);
  return std::make_shared<TokenizerView>(std::move(tokenizer), std::move(eos_ids));
}

}  // namespace tachyon
