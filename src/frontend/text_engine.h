// The engine with text: an AsyncModel (token ids only) whose request streams are read
// on pooled threads (StreamReaderPool) by each request's OutputProcessor, which adds
// the text, applies the stop strings and ends the sequences they stop. What `tachyon
// serve` (EngineBackend) and the commands that drive the engine (generate, bench)
// submit to.
//
//   TextEngine engine(model, make_text_tokenizer(tokenizer), EngineConfig{});
//   GenerateResult r = engine.submit({prompt_ids, config})->wait();  // r.sequences[i].text
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_model.h"
#include "frontend/text.h"
#include "grammar/compile.h"

namespace tachyon {

class OutputProcessor;
class StreamReaderPool;

class TextEngine {
 public:
  using Sink = std::function<void(std::vector<StreamEvent>&&)>;

  // Starts the engine over `model`. The tokenizer may be null: token ids only then, and
  // stop strings are refused. When config.eos_token_ids is empty, the tokenizer's EOS
  // ids end sequences. skip_special_tokens: in the text of every request.
  TextEngine(std::shared_ptr<LanguageModel> model, std::shared_ptr<const TextTokenizer> tokenizer,
             EngineConfig config, bool skip_special_tokens = true);
  ~TextEngine();  // shutdown()
  TextEngine(const TextEngine&) = delete;
  TextEngine& operator=(const TextEngine&) = delete;

  // Checks and submits a request (as AsyncModel::submit, and InvalidArgument for stop
  // strings without a tokenizer); `sink` gets its processed events in order, a batch at
  // a time (whatever arrived together), on a reader thread, never concurrently; the last
  // event of the last batch has done == true. Returns the engine's stream, to cancel it.
  std::shared_ptr<RequestStream> submit(GenerateRequest request, Sink sink);
  // As above; the processed events come on the stream returned (next(), wait();
  // cancel() stops the request).
  std::shared_ptr<RequestStream> submit(GenerateRequest request);

  // Stops the engine (requests in flight end with an error) and waits for the readers
  // to pass on their last events. Idempotent.
  void shutdown();

  EngineStats stats() const { return engine_->stats(); }
  bool healthy() const { return engine_->healthy(); }
  std::string dead_reason() const { return engine_->dead_reason(); }
  int32_t vocab_size() const { return engine_->vocab_size(); }
  int32_t max_seq_len() const { return engine_->max_seq_len(); }
  AsyncModel& engine() { return *engine_; }

 private:
  // A request submitted to the engine, with its processor, not yet read.
  struct Started {
    std::shared_ptr<RequestStream> stream;
    std::shared_ptr<OutputProcessor> processor;
    std::shared_ptr<StreamReaderPool> readers;
  };
  Started start(GenerateRequest request);
  // The request's constraint compiled against the model's vocabulary (cached); throws
  // InvalidArgument naming the field and the problem.
  std::shared_ptr<const grammar::CompiledGrammar> compile(const grammar::GrammarSpec& spec);

  std::shared_ptr<const TextTokenizer> tokenizer_;
  bool skip_special_tokens_ = true;
  std::unique_ptr<AsyncModel> engine_;
  mutable std::mutex readers_mu_;
  std::shared_ptr<StreamReaderPool> readers_;
  // Structured output: the tokenizer's vocabulary as bytes (built at the first
  // constrained request) and the grammars compiled against it.
  std::mutex vocab_mu_;
  std::shared_ptr<const grammar::TokenVocabulary> vocab_;
  grammar::GrammarCache grammars_;
};

}  // namespace tachyon
