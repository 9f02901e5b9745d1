#include "engine/tokenizer_adapter.h"

#include "core/error.h"

namespace tachyon {
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
