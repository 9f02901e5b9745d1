#include "server/generation_call.h"

#include "core/logging.h"
#include "server/server_metrics.h"
#include "server/text_util.h"

namespace tachyon::server {
namespace {

// The error a finished prompt reports, if any.
std::optional<ApiError> event_error(const GenEvent& e) {
  if (e.error) return ApiError::from_exception(*e.error);
  if (e.finish == GenFinish::kTimeout) return ApiError::timeout("the request timed out");
  if (e.finish == GenFinish::kError) return ApiError::internal("generation failed");
  return std::nullopt;
}

}  // namespace

GenerationCall::GenerationCall(std::shared_ptr<ResponseWriter> writer,
                               std::unique_ptr<CallFormatter> formatter,
                               std::vector<CallPrompt> prompts, ServerMetrics* metrics,
                               std::function<void()> on_end)
    : writer_(std::move(writer)),
      formatter_(std::move(formatter)),
      prompts_(std::move(prompts)),
      metrics_(metrics),
      on_end_(std::move(on_end)),
      start_ms_(monotonic_ms()) {
  done_.assign(prompts_.size(), false);
  last_token_ms_.assign(prompts_.size(), -1.0);
  for (const auto& p : prompts_) prompt_tokens_ += static_cast<int64_t>(p.ids.size());
}

GenerationCall::~GenerationCall() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ended_) {
    // Only reachable if the backend dropped a sink without a final event.
    fail_locked(ApiError::internal("the generation ended without a result"));
  }
}

void GenerationCall::start(InferenceBackend& backend) {
  std::lock_guard<std::mutex> lock(mu_);  // events wait until the response has started
  std::weak_ptr<GenerationCall> weak = weak_from_this();
  try {
    for (size_t p = 0; p < prompts_.size(); ++p) {
      auto sink = [self = shared_from_this(), p](std::vector<GenEvent>&& events) {
        self->on_events(p, std::move(events));
      };
      handles_.push_back(backend.generate(prompts_[p].ids, prompts_[p].params, std::move(sink)));
    }
  } catch (...) {
    ApiError err = ApiError::from_current_exception();
    for (auto& h : handles_) h->cancel();
    fail_locked(err);
    return;
  }
  if (formatter_->streaming() && !ended_) {
    writer_->start_stream(200, "text/event-stream",
                          {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    stream_started_ = true;
    if (std::string first = formatter_->stream_start(); !first.empty())
      writer_->write(std::move(first));
  }
  writer_->on_client_close([weak] {
    if (auto self = weak.lock())
      self->cancel(true, ApiError(499, "cancelled", "client disconnected"));
  });
}

void GenerationCall::cancel(bool client_gone, const ApiError& reason) {
  std::vector<std::shared_ptr<GenerationHandle>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_ || cancel_reason_) return;
    cancel_reason_ = reason;
    client_gone_ = client_gone;
    handles = handles_;
  }
  if (client_gone && metrics_) metrics_->request_cancelled();
  for (auto& h : handles) h->cancel();  // outside the lock: a backend may answer at once
}

bool GenerationCall::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void GenerationCall::on_events(size_t p, std::vector<GenEvent>&& events) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_ || done_[p]) return;
  double now = monotonic_ms();
  for (const auto& e : events) {
    if (e.token_ids.empty() || e.index != 0) continue;  // latencies follow sequence 0
    if (last_token_ms_[p] < 0) {
      if (metrics_) metrics_->first_token((now - start_ms_) / 1000.0);
    } else if (metrics_) {
      for (size_t i = 0; i < e.token_ids.size(); ++i)
        metrics_->inter_token((now - last_token_ms_[p]) / 1000.0 /
                              static_cast<double>(e.token_ids.size()));
    }
    last_token_ms_[p] = now;
  }
  std::optional<ApiError> error;
  bool prompt_done = false;
  for (const auto& e : events) {
    generated_tokens_ += static_cast<int64_t>(e.token_ids.size());
    if (e.finish == GenFinish::kLength) finish_reason_ = "length";
    if (!e.done) continue;
    prompt_done = true;
    queue_ms_ = std::max(queue_ms_, e.timings.queue_ms);
    if (cancel_reason_ || e.finish == GenFinish::kCancelled) {
      error = cancel_reason_ ? *cancel_reason_
                             : ApiError(499, "cancelled", "the request was cancelled");
    } else {
      error = event_error(e);
    }
  }
  if (client_gone_) {
    if (prompt_done) {
      done_[p] = true;
      if (++num_done_ == prompts_.size()) end_locked();
    }
    return;
  }
  if (!error) {
    std::string bytes = formatter_->on_events(p, events);
    if (stream_started_ && !bytes.empty() && !writer_->write(std::move(bytes))) {
      // The client is gone or stopped reading: stop generating.
      client_gone_ = true;
      cancel_reason_ = ApiError(499, "cancelled", "client stopped reading");
      for (auto& h : handles_) h->cancel();
    }
  }
  if (!prompt_done) return;
  done_[p] = true;
  ++num_done_;
  if (error) return fail_locked(*error);
  if (num_done_ == prompts_.size()) complete_locked();
}

void GenerationCall::fail_locked(const ApiError& e) {
  if (ended_) return;
  for (size_t i = 0; i < handles_.size(); ++i)
    if (!done_[i]) handles_[i]->cancel();
  if (!client_gone_ && e.status() != 499) {
    if (e.status() >= 500) log_warning("generation failed: {}", e.message());
    if (stream_started_) {
      writer_->write(formatter_->stream_error(e));
      writer_->end_stream();
    } else {
      writer_->respond(e.status(), "application/json", dump_json(formatter_->error_body(e)));
    }
  }
  end_locked();
}

void GenerationCall::complete_locked() {
  std::string out = formatter_->finish();
  if (stream_started_) {
    if (!out.empty()) writer_->write(std::move(out));
    writer_->end_stream();
  } else {
    writer_->respond(200, "application/json", std::move(out));
  }
  if (metrics_)
    metrics_->request_finished(prompt_tokens_, generated_tokens_,
                               (monotonic_ms() - start_ms_) / 1000.0, queue_ms_ / 1000.0,
                               finish_reason_);
  end_locked();
}

void GenerationCall::end_locked() {
  if (ended_) return;
  ended_ = true;
  handles_.clear();  // the sinks hold this call: let it go
  if (on_end_) {
    auto fn = std::move(on_end_);
    on_end_ = nullptr;
    fn();
  }
}

}  // namespace tachyon::server
