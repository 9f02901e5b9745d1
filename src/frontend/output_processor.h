// The frontend's output processing (vLLM v1's OutputProcessor): turns the engine's token
// events of one request into the events its caller sees. Each output sequence has its
// own incremental detokenizer (the text of each event, special tokens skipped or not)
// and stop-string matcher: text that might begin a stop string is held back until it
// is known not to, and a stop string found (across token boundaries) ends the sequence
// there: its last event carries the text before the stop string, FinishReason::kStop
// and the string matched; the processor asks the engine to end the sequence (which
// frees its KV blocks), and what the engine produced for it after that is dropped.
// Beam search sends each beam once, complete: its text is decoded whole, and stop
// strings do not apply to it. EOS and stop token ids are the engine's: they end a
// sequence without text.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/generate_config.h"
#include "engine/request.h"
#include "frontend/text.h"

namespace tachyon {

class OutputProcessor {
 public:
  // Called with an output index whose text matched a stop string (the engine is to end
  // that sequence: RequestStream::stop_sequence).
  using StopSequence = std::function<void(int32_t index)>;

  // tokenizer may be null: events then pass with token ids only, and a config with stop
  // strings is refused (InvalidArgument).
  OutputProcessor(std::shared_ptr<const TextTokenizer> tokenizer, const GenerateConfig& config,
                  bool skip_special_tokens, StopSequence stop_sequence);
  OutputProcessor(const OutputProcessor&) = delete;
  OutputProcessor& operator=(const OutputProcessor&) = delete;

  // The events to pass on for a batch of the engine's events, in order.
  std::vector<StreamEvent> process(std::vector<StreamEvent>&& events);

 private:
  struct SeqState {
    std::unique_ptr<IncrementalDetokenizer> detok;
    StopStringMatcher stop{{}};
    int32_t generated = 0;  // tokens received
    bool stopped = false;   // by a stop string: the engine's later events are dropped
    int32_t dropped = 0;    // tokens dropped after the stop
  };
  SeqState& state(int32_t index);
  // Adds the text of a sampled sequence's event; false when the event is to be dropped.
  bool sampled_event(StreamEvent& e);
  void beam_event(StreamEvent& e) const;
  // Corrects the request's last event for the tokens dropped.
  void last_event(StreamEvent& e) const;

  std::shared_ptr<const TextTokenizer> tokenizer_;
  bool skip_special_tokens_ = true;
  bool beam_ = false;
  int32_t min_new_tokens_ = 0;
  std::vector<std::string> stop_strings_;
  StopSequence stop_sequence_;
  std::vector<SeqState> seqs_;  // by output index
};

}  // namespace tachyon
