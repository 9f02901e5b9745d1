#include "frontend/text_engine.h"

#include <algorithm>

#include "core/error.h"
#include "frontend/output_processor.h"
#include "frontend/stream_reader.h"

namespace tachyon {

namespace {

EngineConfig with_eos(EngineConfig c, const TextTokenizer* tokenizer) {
  if (c.eos_token_ids.empty() && tokenizer) c.eos_token_ids = tokenizer->eos_token_ids();
  return c;
}

}  // namespace

TextEngine::TextEngine(std::shared_ptr<LanguageModel> model,
                       std::shared_ptr<const TextTokenizer> tokenizer, EngineConfig config,
                       bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)),
      skip_special_tokens_(skip_special_tokens),
      engine_(std::make_unique<AsyncModel>(std::move(model),
                                           with_eos(std::move(config), tokenizer_.get()))),
      readers_(std::make_shared<StreamReaderPool>()) {}

TextEngine::~TextEngine() {
  shutdown();
}

void TextEngine::shutdown() {
  engine_->shutdown();
  std::shared_ptr<StreamReaderPool> readers;
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    readers.swap(readers_);
  }
  readers.reset();  // joins the readers once their streams have ended
}

TextEngine::Started TextEngine::start(GenerateRequest request) {
  Started s;
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    s.readers = readers_;
  }
  if (!s.readers) raise<Unavailable>("the engine is shut down");
  // The stop strings are the processor's: the engine never sees them.
  GenerateConfig& cfg = request.config;
  cfg.validate();
  auto target = std::make_shared<std::weak_ptr<RequestStream>>();
  s.processor = std::make_shared<OutputProcessor>(tokenizer_, cfg, skip_special_tokens_,
                                                  [target](int32_t index) {
                                                    if (auto t = target->lock())
                                                      t->stop_sequence(index);
                                                  });
  cfg.stop_words_str.clear();
  if (cfg.constraint && !cfg.grammar) cfg.grammar = compile(*cfg.constraint);
  s.stream = engine_->submit(std::move(request));
  *target = s.stream;  // before the reader starts
  return s;
}

std::shared_ptr<const grammar::CompiledGrammar> TextEngine::compile(
    const grammar::GrammarSpec& spec) {
  std::shared_ptr<const grammar::TokenVocabulary> vocab;
  {
    std::lock_guard<std::mutex> lock(vocab_mu_);
    if (!vocab_) {
      if (!tokenizer_ || tokenizer_->vocab_size() == 0)
        raise<InvalidArgument>("{}: constrained decoding needs a tokenizer",
                               grammar::grammar_kind_name(spec.kind));
      // The model's rows may be wider than the tokenizer's vocabulary: the ids past it
      // are never text.
      const int32_t n = engine_->vocab_size();
      std::vector<std::string> bytes(static_cast<size_t>(n));
      std::vector<bool> special(static_cast<size_t>(n), true);
      for (int32_t id = 0; id < std::min(n, tokenizer_->vocab_size()); ++id) {
        if (auto b = tokenizer_->token_bytes(id)) {
          bytes[static_cast<size_t>(id)] = std::move(*b);
          special[static_cast<size_t>(id)] = false;
        }
      }
      std::vector<int32_t> eos;
      for (int32_t e : engine_->eos_ids())
        if (e >= 0 && e < n) eos.push_back(e);
      vocab_ = std::make_shared<const grammar::TokenVocabulary>(std::move(bytes),
                                                                std::move(special), std::move(eos));
    }
    vocab = vocab_;
  }
  return grammars_.get(spec, vocab);
}

std::shared_ptr<RequestStream> TextEngine::submit(GenerateRequest request, Sink sink) {
  Started s = start(std::move(request));
  s.readers->read(s.stream, [processor = s.processor,
                             sink = std::move(sink)](std::vector<StreamEvent>&& events) {
    std::vector<StreamEvent> out = processor->process(std::move(events));
    if (!out.empty()) sink(std::move(out));
  });
  return s.stream;
}

std::shared_ptr<RequestStream> TextEngine::submit(GenerateRequest request) {
  Started s = start(std::move(request));
  auto out = std::make_shared<RequestStream>(s.stream->id());
  std::weak_ptr<RequestStream> weak = s.stream;
  out->set_on_cancel([weak](int64_t) {
    if (auto e = weak.lock()) e->cancel();
  });
  s.readers->read(s.stream, [processor = s.processor, out](std::vector<StreamEvent>&& events) {
    out->push(processor->process(std::move(events)));
  });
  return out;
}

}  // namespace tachyon
