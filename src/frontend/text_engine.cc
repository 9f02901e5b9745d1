#include "frontend/text_engine.h"

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
  s.stream = engine_->submit(std::move(request));
  *target = s.stream;  // before the reader starts
  return s;
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
