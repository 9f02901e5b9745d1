#include "server/server_metrics.h"

namespace tachyon::server {
namespace {

std::vector<std::string> both(const std::string& suffix) {
  return {"tachyon:" + suffix, "vllm:" + suffix};
}

}  // namespace

ServerMetrics::ServerMetrics(std::string model_name, std::function<BackendStats()> stats,
                             std::function<int64_t()> queued)
    : model_{{"model_name", std::move(model_name)}}, stats_(stats) {
  auto& r = registry_;
  r.gauge_fn(both("num_requests_running"), "Number of requests running in the engine.", model_,
             [stats] { return static_cast<double>(stats().num_running); });
  r.gauge_fn(both("num_requests_waiting"),
             "Number of requests waiting: in the engine's queue and for admission by the server.",
             model_,
             [stats, queued] { return static_cast<double>(stats().num_waiting + queued()); });
  r.gauge_fn(
      {"tachyon:kv_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
      "Fraction of KV cache blocks in use (1 means full).", model_,
      [stats] { return stats().kv_cache_usage; });
  r.counter_fn(both("num_preemptions_total"),
               "Cumulative number of preemptions (requests swapped out or recomputed).", model_,
               [stats] { return static_cast<double>(stats().num_preemptions); });
  r.counter_fn({"tachyon:num_swap_outs_total"},
               "Cumulative number of preempted requests whose KV blocks were swapped out to "
               "host memory instead of recomputed.",
               model_, [stats] { return static_cast<double>(stats().num_swap_outs); });
  r.counter_fn(both("prefix_cache_queries_total"),
               "Prefix cache queries, in terms of prompt tokens looked up.", model_,
               [stats] { return static_cast<double>(stats().prefix_cache_queries); });
  r.counter_fn(both("prefix_cache_hits_total"),
               "Prefix cache hits, in terms of prompt tokens found in the cache.", model_,
               [stats] { return static_cast<double>(stats().prefix_cache_hits); });
  r.counter_fn({"tachyon:prefix_cache_host_hits_total"},
               "Prefix cache hits brought back from the host memory tier, in tokens.", model_,
               [stats] { return static_cast<double>(stats().prefix_cache_host_hits); });
  r.gauge_fn({"tachyon:prefix_cache_cached_blocks"},
             "KV blocks the prefix cache holds that no request uses (reusable until evicted).",
             model_, [stats] { return static_cast<double>(stats().num_cached_blocks); });
  r.gauge_fn({"tachyon:prefix_cache_pinned_blocks"},
             "KV blocks pinned in the prefix cache (task prompts), never evicted.", model_,
             [stats] { return static_cast<double>(stats().num_pinned_blocks); });
  r.counter_fn(both("spec_decode_num_drafts_total"),
               "Speculative decoding: verify steps of a sequence with draft tokens.", model_,
               [stats] { return static_cast<double>(stats().spec_num_drafts); });
  r.counter_fn(both("spec_decode_num_draft_tokens_total"),
               "Speculative decoding: draft tokens verified.", model_,
               [stats] { return static_cast<double>(stats().spec_num_draft_tokens); });
  r.counter_fn(both("spec_decode_num_accepted_tokens_total"),
               "Speculative decoding: draft tokens accepted.", model_,
               [stats] { return static_cast<double>(stats().spec_num_accepted_tokens); });
  prompt_tokens_ =
      &r.counter(both("prompt_tokens_total"), "Number of prefill tokens processed.", model_);
  generation_tokens_ =
      &r.counter(both("generation_tokens_total"), "Number of generation tokens processed.", model_);
  ttft_ = &r.histogram(both("time_to_first_token_seconds"),
                       "Histogram of time to first token in seconds.", ttft_buckets(), model_);
  itl_ = &r.histogram({"tachyon:inter_token_latency_seconds", "vllm:inter_token_latency_seconds",
                       "vllm:time_per_output_token_seconds"},
                      "Histogram of the time between successive output tokens in seconds.",
                      itl_buckets(), model_);
  e2e_ = &r.histogram(both("e2e_request_latency_seconds"),
                      "Histogram of end to end request latency in seconds.", e2e_buckets(), model_);
  queue_ = &r.histogram(
      both("request_queue_time_seconds"),
      "Histogram of time spent waiting (server admission and engine queue) in seconds.",
      ttft_buckets(), model_);
  prompt_len_ =
      &r.histogram(both("request_prompt_tokens"), "Number of prefill tokens per finished request.",
                   token_count_buckets(), model_);
  generation_len_ = &r.histogram(both("request_generation_tokens"),
                                 "Number of generation tokens per finished request.",
                                 token_count_buckets(), model_);
  cancelled_ = &r.counter({"tachyon:requests_cancelled_total"},
                          "Requests cancelled because the client disconnected.", {});
}

std::string ServerMetrics::render() {
  {
    std::lock_guard<std::mutex> lock(spec_mu_);
    const size_t n = stats_().spec_accepted_per_pos.size();
    for (; spec_positions_ < n; ++spec_positions_) {
      Labels l = model_;
      l.emplace_back("position", std::to_string(spec_positions_));
      const size_t pos = spec_positions_;
      registry_.counter_fn(both("spec_decode_num_accepted_tokens_per_pos_total"),
                           "Speculative decoding: draft tokens accepted, by position in the draft.",
                           l, [stats = stats_, pos] {
                             const BackendStats s = stats();
                             return pos < s.spec_accepted_per_pos.size()
                                        ? static_cast<double>(s.spec_accepted_per_pos[pos])
                                        : 0.0;
                           });
    }
  }
  return registry_.render();
}

void ServerMetrics::request_finished(int64_t prompt_tokens, int64_t generation_tokens,
                                     double e2e_seconds, double queue_seconds,
                                     const std::string& finish_reason) {
  prompt_tokens_->inc(static_cast<double>(prompt_tokens));
  generation_tokens_->inc(static_cast<double>(generation_tokens));
  e2e_->observe(e2e_seconds);
  queue_->observe(queue_seconds);
  prompt_len_->observe(static_cast<double>(prompt_tokens));
  generation_len_->observe(static_cast<double>(generation_tokens));
  Labels l = model_;
  l.emplace_back("finished_reason", finish_reason);
  registry_.counter(both("request_success_total"), "Count of successfully processed requests.", l)
      .inc();
}

void ServerMetrics::request_rejected(const std::string& reason) {
  registry_
      .counter({"tachyon:requests_rejected_total"},
               "Requests refused before generation, by reason.", {{"reason", reason}})
      .inc();
}

void ServerMetrics::http_response(const std::string& route, int status) {
  registry_
      .counter({"tachyon:http_requests_total"}, "HTTP requests answered, by route and status.",
               {{"route", route}, {"status", std::to_string(status)}})
      .inc();
}

}  // namespace tachyon::server
