// What the HTTP layer adds to time-to-first-token: the same prompts go, alternately,
// straight into the engine (AsyncModel::submit, first event read in this thread) and
// through an in-process `serve` stack (HTTP request, parsing, admission, streaming,
// SSE back to an HTTP client in this process). One request at a time, so queueing
// plays no part; each request has its own random prompt, so no prefix is reused.
//   tachyon bench-serving --overhead [--model DIR] [--num-requests 200] [--input-len 32]
//                         [--output-len 4] [--threads N] [--json]
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/args.h"
#include "cli/bench_serving.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "frontend/engine_backend.h"
#include "server/app.h"
#include "server/http_server.h"

namespace tachyon::cli {

int run_overhead_bench(const std::vector<std::string>& argv) {
  Args args(argv, {"model", "num-requests", "input-len", "output-len", "threads", "seed"}, {"overhead", "json"});
  std::string model = args.get_or("model", "models/tiny-kjv-chat");
  int64_t n = args.get_int("num-requests", 200);
  int64_t input_len = args.get_int("input-len", 32);
  int64_t output_len = args.get_int("output-len", 4);
  if (args.has("threads")) ThreadPool::set_global_threads(static_cast<int>(args.get_int("threads", 0)));
  if (n < 1 || input_len < 1 || output_len < 1) raise<InvalidArgument>("counts and lengths must be positive");

  EngineBackendOptions bo;
  bo.model_dir = model;
  auto backend = EngineBackend::load(bo);
  server::AppOptions ao;
  ao.model_name = backend->model_info().name;
  server::ServerApp app(ao);
  app.set_backend(backend);
  server::HttpServerOptions ho;
  ho.port = 0;
  ho.io_threads = 1;
  server::HttpServer http(ho, [&app](server::HttpRequest&& r, std::shared_ptr<server::ResponseWriter> w) {
    app.handle(std::move(r), std::move(w));
  });
  http.start();

  std::mt19937_64 rng(static_cast<uint64_t>(args.get_int("seed", 0)));
  std::uniform_int_distribution<int32_t> tok(300, std::max(301, backend->model_info().vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < 2 * n; ++i) {  // distinct prompts: no prefix-cache hits
    std::vector<int32_t> p;
    for (int64_t k = 0; k < input_len; ++k) p.push_back(tok(rng));
    prompts.push_back(std::move(p));
  }

  std::vector<double> direct, over_http;
  for (int64_t i = -4; i < n; ++i) {  // 4 warm-up rounds
    size_t k = static_cast<size_t>(std::max<int64_t>(0, i));
    GenerateRequest req;
    req.prompt_ids = prompts[2 * k];
    req.config.max_new_tokens = static_cast<int32_t>(output_len);
    req.config.temperature = 0;
    req.config.ignore_eos = true;
    auto t0 = std::chrono::steady_clock::now();
    auto stream = backend->engine().submit(std::move(req));
    double ttft = -1;
    for (;;) {
      auto e = stream->next(std::chrono::seconds(60));
      if (!e) raise<Internal>("the engine did not answer");
      if (ttft < 0 && !e->token_ids.empty())
        ttft = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (e->done) break;
    }
    BenchOptions o;
    o.port = std::to_string(http.port());
    o.num_requests = 1;
    o.concurrency = 1;
    o.output_len = output_len;
    o.prompts = {prompts[2 * k + 1]};
    auto r = run_http_requests(o);
    if (!r[0].ok) raise<Internal>("HTTP request failed: {}", r[0].error);
    if (i < 0) continue;
    direct.push_back(ttft);
    over_http.push_back(r[0].ttft_ms);
  }
  std::vector<double> diff;
  for (size_t i = 0; i < direct.size(); ++i) diff.push_back(over_http[i] - direct[i]);
  Json report = {{"model", model},
                 {"num_requests", n},
                 {"input_len", input_len},
                 {"engine_ttft_ms", dist_ms(direct)},
                 {"http_ttft_ms", dist_ms(over_http)},
                 {"added_ms", dist_ms(diff)}};
  if (args.flag("json")) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    for (const char* k : {"engine_ttft_ms", "http_ttft_ms", "added_ms"}) {
      const Json& d = report[k];
      std::printf("%-15s mean %7.3f  p50 %7.3f  p90 %7.3f  p99 %7.3f\n", k, d["mean"].get<double>(),
                  d["p50"].get<double>(), d["p90"].get<double>(), d["p99"].get<double>());
    }
  }
  http.stop();
  backend->shutdown();
  return 0;
}

}  // namespace tachyon::cli
