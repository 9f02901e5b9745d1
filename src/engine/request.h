// A request to the engine and the stream its results come back on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generate_config.h"
#include "engine/sampler.h"
#include "model/vision/image.h"

namespace tachyon {

struct GenerateRequest {
  std::vector<int32_t> prompt_ids;
  GenerateConfig config;
  // What besides the token ids the prompt's K/V depends on (a LoRA adapter, embeddings
  // injected at positions): the prefix cache shares blocks only between requests of the
  // same salt.
  uint64_t cache_salt = 0;
  // The LoRA adapter it runs with (AsyncModel::add_adapter's id); 0: the base model.
  int32_t adapter = 0;
  // Its images, in prompt order (a model with a vision tower): the prompt holds
  // LanguageModel::image_tokens() image tokens for each (expand_image_tokens), and the
  // prefix cache shares its blocks only with requests of the same images.
  std::vector<std::shared_ptr<const ImageInput>> images;
};

enum class FinishReason {
  kStop,       // EOS, a stop word or a stop string (or beam search converged)
  kLength,     // max_new_tokens or the model's maximum sequence length
  kCancelled,  // RequestStream::cancel()
  kTimeout,    // timeout_ms expired
  kError,      // the request failed; see StreamEvent::error
};
std::string_view finish_reason_name(FinishReason r);

// Per-request measurements: RTP-LLM's aux_info. Times in milliseconds from submission.
struct RequestTimings {
  double queue_ms = 0;        // until first scheduled
  double first_token_ms = 0;  // until the first generated token (first_token_cost_time)
  double total_ms = 0;        // until finished (cost_time)
  int32_t iter_count = 0;     // engine steps the request took part in
  int32_t input_len = 0;
  int32_t output_len = 0;  // tokens generated, summed over the returned sequences
  int32_t prefix_len = 0;  // the system (task) prompt put before the request's own
  int32_t reuse_len = 0;   // prompt tokens taken from the prefix cache
  int32_t num_preemptions = 0;
  // Gaps between successive tokens of sequence 0 (inter-token latency).
  std::vector<double> token_gaps_ms;
  // Speculative decoding: the steps that verified drafts of its sequences (one per
  // sequence and step), and how often the draft at each position was accepted.
  int32_t speculative_draft_rounds = 0;
  std::vector<int32_t> speculative_accepted_tokens_per_pos;
};

struct ErrorInfo {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

// One delta of a request's output. Sampled sequences stream their tokens as they come;
// beam search sends each returned beam once, complete, when the search ends. The engine
// fills the token fields; text is the frontend's (frontend/output_processor.h).
struct StreamEvent {
  int32_t index = 0;               // which output sequence (0 .. n-1); -1 on the last event
  std::vector<int32_t> token_ids;  // new tokens (the EOS is never included)
  std::string text;                // new text (the frontend's)
  std::string stop_string;         // on a last event: the stop string that ended it
  std::vector<float> logprobs;     // per new token, when return_logprobs
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per new token
  std::optional<FinishReason> finish_reason;            // set on the sequence's last event
  double cum_log_prob = 0;  // so far (beam: the beam's summed log-probability)
  // The request's last event (index -1, no tokens): everything has been sent.
  bool done = false;
  RequestTimings timings;          // on the last event
  std::optional<ErrorInfo> error;  // on the last event, when the request failed
};

// One finished output sequence, gathered from a stream.
struct SequenceOutput {
  std::vector<int32_t> output_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::kStop;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  double cum_log_prob = 0;
};

struct GenerateResult {
  std::vector<SequenceOutput> sequences;  // by index
  RequestTimings timings;
  std::optional<ErrorInfo> error;
};

// The caller's end of a request. Any thread may read it or cancel it.
class RequestStream {
 public:
  explicit RequestStream(int64_t id) : id_(id) {}

  int64_t id() const { return id_; }

  // The next event; nullopt if none came within the timeout or the stream is over.
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout);
  // Waits for the final event, then reads every remaining event and gathers them.
  GenerateResult wait();
  // Asks the engine to stop the request; its blocks are freed on the engine's next
  // turn and a final event with FinishReason::kCancelled follows.
  void cancel();
  // Asks the engine to end output sequence `index` as stopped (FinishReason::kStop), as
  // the frontend does when its text holds a stop string; its blocks are freed on the
  // engine's next turn. A sequence already ended stays as it is. Tokens the engine
  // chose before it took the call still come, then its last event.
  void stop_sequence(int32_t index);
  bool cancel_requested() const { return cancelled_.load(std::memory_order_relaxed); }
  // True once the final event has been read.
  bool finished() const;

  // Engine side.
  void push(std::vector<StreamEvent> events);
  void set_on_cancel(std::function<void(int64_t)> fn) { on_cancel_ = std::move(fn); }
  void set_on_stop_sequence(std::function<void(int64_t, int32_t)> fn) {
    on_stop_sequence_ = std::move(fn);
  }

 private:
  const int64_t id_;
  std::atomic<bool> cancelled_{false};
  std::function<void(int64_t)> on_cancel_;
  std::function<void(int64_t, int32_t)> on_stop_sequence_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  bool done_pushed_ = false;
  bool done_read_ = false;
  int event_waiters_ = 0;   // threads in next()
  int result_waiters_ = 0;  // threads in wait()
};

}  // namespace tachyon
