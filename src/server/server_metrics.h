// The server's metrics, under "tachyon:" names and under the "vllm:" names dashboards
// already scrape (vllm:num_requests_running, vllm:time_to_first_token_seconds, ...).
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "frontend/backend.h"
#include "server/metrics.h"

namespace tachyon::server {

class ServerMetrics {
 public:
  // stats() is called at scrape time (it must be cheap and thread-safe); queued() is
  // the number of requests waiting for admission in the server itself.
  ServerMetrics(std::string model_name, std::function<BackendStats()> stats,
                std::function<int64_t()> queued);

  void first_token(double seconds) { ttft_->observe(seconds); }
  void inter_token(double seconds) { itl_->observe(seconds); }
  void request_finished(int64_t prompt_tokens, int64_t generation_tokens, double e2e_seconds,
                        double queue_seconds, const std::string& finish_reason);
  void request_cancelled() { cancelled_->inc(); }
  void request_rejected(const std::string& reason);
  void http_response(const std::string& route, int status);

  // The registry's text; the speculative decoding series of draft positions seen since
  // the last scrape are registered first.
  std::string render();
  MetricsRegistry& registry() { return registry_; }

 private:
  MetricsRegistry registry_;
  Labels model_;
  std::function<BackendStats()> stats_;
  std::mutex spec_mu_;
  size_t spec_positions_ = 0;  // draft positions with a series
  Counter* prompt_tokens_;
  Counter* generation_tokens_;
  Counter* cancelled_;
  Histogram* ttft_;
  Histogram* itl_;
  Histogram* e2e_;
  Histogram* queue_;
  Histogram* prompt_len_;
  Histogram* generation_len_;
};

}  // namespace tachyon::server
