// One generation request in flight over HTTP: submits its prompts to the backend,
// shapes the events through a protocol's formatter (OpenAI chat/completions, RTP-LLM
// native) and writes them, streamed or as one response. A client that goes away
// cancels the generation at once; so does a shutdown that runs out of patience.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/backend.h"
#include "server/api_error.h"
#include "server/http.h"

namespace tachyon::server {

class ServerMetrics;

// Shapes one protocol's responses. Called under the call's lock: never concurrently.
class CallFormatter {
 public:
  virtual ~CallFormatter() = default;
  virtual bool streaming() const = 0;
  // Streaming: bytes sent right after the headers.
  virtual std::string stream_start() { return {}; }
  // Events of prompt p, in order. Streaming: the bytes to send now.
  virtual std::string on_events(size_t p, const std::vector<GenEvent>& events) = 0;
  // Every prompt finished well: the stream's trailing bytes, or the whole body.
  virtual std::string finish() = 0;
  // An error after the stream started: bytes that report it and end the stream.
  virtual std::string stream_error(const ApiError& e) = 0;
  // The body of an error response (nothing sent yet).
  virtual Json error_body(const ApiError& e) const = 0;
};

struct CallPrompt {
  std::vector<int32_t> ids;
  GenerationParams params;
};

class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  // on_end runs once when the call is over (answered, failed or abandoned): the
  // caller releases its admission slot there.
  GenerationCall(std::shared_ptr<ResponseWriter> writer, std::unique_ptr<CallFormatter> formatter,
                 std::vector<CallPrompt> prompts, ServerMetrics* metrics,
                 std::function<void()> on_end);
  ~GenerationCall();

  // Submits every prompt; answers the request with an error if a submission fails.
  void start(InferenceBackend& backend);
  // Stops generating: `client_gone` when the client left (nothing more is written),
  // otherwise the request ends with `reason` (e.g. 503 on shutdown).
  void cancel(bool client_gone, const ApiError& reason);

  bool finished() const;
  double start_ms() const { return start_ms_; }

 private:
  void on_events(size_t p, std::vector<GenEvent>&& events);
  void fail_locked(const ApiError& e);
  void complete_locked();
  void end_locked();

  std::shared_ptr<ResponseWriter> writer_;
  std::unique_ptr<CallFormatter> formatter_;
  std::vector<CallPrompt> prompts_;
  ServerMetrics* metrics_;
  std::function<void()> on_end_;
  double start_ms_;

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<GenerationHandle>> handles_;
  std::vector<bool> done_;
  size_t num_done_ = 0;
  bool stream_started_ = false;
  bool ended_ = false;
  bool client_gone_ = false;
  std::optional<ApiError> cancel_reason_;
  // Per prompt: time of the last token (for inter-token latency), first seen?
  std::vector<double> last_token_ms_;
  int64_t prompt_tokens_ = 0;
  int64_t generated_tokens_ = 0;
  double queue_ms_ = 0;
  std::string finish_reason_ = "stop";
};

}  // namespace tachyon::server
