// Serving-mode benchmark against a running server (`tachyon bench-serving`, and
// `tachyon bench --url ...` once the offline bench command forwards to it), and the
// HTTP-overhead benchmark (`tachyon bench-serving --overhead --model DIR`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace tachyon::cli {

struct BenchOptions {
  std::string host = "127.0.0.1", port = "8088", endpoint = "/v1/completions", api_key, model;
  // num_requests counts conversations of `turns` turns each (cli/bench_workload.h); a
  // turn's prompt is the one before, its output text and a new user part. The
  // OpenAI-style endpoints return no token ids: conversations are carried as text.
  int64_t num_requests = 200, concurrency = 0, input_len = 128, output_len = 128, seed = 0;
  int64_t shared_prefix_len = 0, turns = 1;  // prefix: tokens, words on the chat endpoint
  double request_rate = 0;
  bool json = false;
  std::vector<std::vector<int32_t>> prompts;  // token-id prompts to cycle through (else random)
};

struct BenchResult {
  bool ok = false;
  std::string error;
  double ttft_ms = 0, e2e_ms = 0;
  std::vector<double> itl_ms;
  int64_t prompt_tokens = 0, output_tokens = 0;
  // usage.prompt_tokens_details.cached_tokens; -1 when the server does not report it.
  int64_t cached_tokens = -1;
};

// Runs the benchmark described by the flags (see bench_serving.cc); returns the exit code
// (0 when every request succeeded).
int run_serving_bench(const std::vector<std::string>& args);
// The load itself: streaming requests as `o` describes; the wall time in *wall_ms.
// Results come by conversation and turn: conversation i's turn k at i * turns + k.
std::vector<BenchResult> run_http_requests(const BenchOptions& o, double* wall_ms = nullptr);
// TTFT through the HTTP layer versus straight into the engine (bench_overhead.cc).
int run_overhead_bench(const std::vector<std::string>& args);
// {"mean", "p50", "p90", "p99"} of a sample.
Json dist_ms(const std::vector<double>& v);

}  // namespace tachyon::cli
