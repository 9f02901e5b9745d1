// What the HTTP layer adds to time-to-first-token. Requests go, alternately, straight
// into the engine (AsyncModel::submit, first event read in this thread) and through an
// in-process `serve` stack (HTTP request, parsing, admission, the stream reader, SSE
// back to an HTTP client in this process). One request at a time, so queueing plays no
// part; each request has its own random prompt, so no prefix is reused.
// The engine measures its own part of each request (submission to first token,
// RequestTimings::first_token_ms); the client's TTFT minus that is what the layers
// around the engine add, request by request, free of the engine's own variance.
//   tachyon bench-serving --overhead [--model DIR] [--num-requests 200] [--input-len 32]
//                         [--output-len 4] [--threads N] [--json]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/args.h"
#include "cli/bench_serving.h"
#include "cli/model_dir.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "frontend/engine_backend.h"
#include "server/app.h"
#include "server/http_server.h"

namespace tachyon::cli {

namespace {

// Forwards to the engine backend and keeps the engine's first-token time of the last
// request (one request at a time here).
class TimingBackend : public InferenceBackend {
 public:
  explicit TimingBackend(std::shared_ptr<EngineBackend> b) : b_(std::move(b)) {}
  const ModelInfo& model_info() const override { return b_->model_info(); }
  std::vector<int32_t> encode(std::string_view t, bool s) const override {
    return b_->encode(t, s);
  }
  std::string decode(const std::vector<int32_t>& ids, bool s) const override {
    return b_->decode(ids, s);
  }
  std::string token_bytes(int32_t id) const override { return b_->token_bytes(id); }
  ChatPrompt render_chat(const Json& m, const nlohmann::ordered_json& t, bool g, const Json& e,
                         const RenderControl& c) const override {
    return b_->render_chat(m, t, g, e, c);
  }
  std::vector<int32_t> encode_chat(const ChatPrompt& p, bool s) const override {
    return b_->encode_chat(p, s);
  }
  std::shared_ptr<GenerationHandle> generate(std::vector<int32_t> prompt,
                                             const GenerationParams& params,
                                             GenSink sink) override {
    return b_->generate(std::move(prompt), params,
                        [this, sink = std::move(sink)](std::vector<GenEvent>&& evs) {
                          for (const auto& e : evs)
                            if (e.done) engine_first_token_ms.store(e.timings.first_token_ms);
                          sink(std::move(evs));
                        });
  }
  int32_t pin_prefix(const std::vector<int32_t>& ids) override { return b_->pin_prefix(ids); }
  bool healthy() const override { return b_->healthy(); }
  std::string dead_reason() const override { return b_->dead_reason(); }
  BackendStats stats() const override { return b_->stats(); }
  std::atomic<double> engine_first_token_ms{-1};

 private:
  std::shared_ptr<EngineBackend> b_;
};

}  // namespace

int run_overhead_bench(const std::vector<std::string>& argv) {
  const auto parsed = parse_command(
      "bench-overhead", argv,
      "usage: tachyon bench-serving --overhead [--model DIR] [--num-requests N] "
      "[--input-len L] [--output-len O] [--json]\n\n"
      "TTFT through an in-process HTTP server against the engine's own, per request.\n");
  if (!parsed) return 0;
  const SettingValues& args = *parsed;
  const std::string model = resolve_model_dir(args.str("model"));
  const int64_t n = args.integer("num-requests");
  const int64_t input_len = args.integer("input-len");
  const int64_t output_len = args.integer("output-len");

  EngineBackendOptions bo;
  bo.model_dir = model;
  auto backend = EngineBackend::load(bo);
  server::AppOptions ao;
  ao.model_name = backend->model_info().name;
  server::ServerApp app(ao);
  auto timing = std::make_shared<TimingBackend>(backend);
  app.set_backend(timing);
  server::HttpServerOptions ho;
  ho.port = 0;
  ho.io_threads = 1;
  server::HttpServer http(
      ho, [&app](server::HttpRequest&& r, std::shared_ptr<server::ResponseWriter> w) {
        app.handle(std::move(r), std::move(w));
      });
  http.start();

  std::mt19937_64 rng(static_cast<uint64_t>(args.integer("seed")));
  std::uniform_int_distribution<int32_t> tok(300,
                                             std::max(301, backend->model_info().vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < 2 * n; ++i) {  // distinct prompts: no prefix-cache hits
    std::vector<int32_t> p;
    for (int64_t k = 0; k < input_len; ++k) p.push_back(tok(rng));
    prompts.push_back(std::move(p));
  }

  std::vector<double> direct, over_http, direct_added, http_added;
  for (int64_t i = -4; i < n; ++i) {  // 4 warm-up rounds
    size_t k = static_cast<size_t>(std::max<int64_t>(0, i));
    GenerateRequest req;
    req.prompt_ids = prompts[2 * k];
    req.config.max_new_tokens = static_cast<int32_t>(output_len);
    req.config.temperature = 0;
    req.config.ignore_eos = true;
    auto t0 = std::chrono::steady_clock::now();
    auto stream = backend->engine().submit(std::move(req));
    double ttft = -1, engine_ttft = -1;
    for (;;) {
      auto e = stream->next(std::chrono::seconds(60));
      if (!e) raise<Internal>("the engine did not answer");
      if (ttft < 0 && !e->token_ids.empty())
        ttft = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count();
      if (e->done) {
        engine_ttft = e->timings.first_token_ms;
        break;
      }
    }
    timing->engine_first_token_ms.store(-1);
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
    direct_added.push_back(ttft - engine_ttft);
    http_added.push_back(r[0].ttft_ms - timing->engine_first_token_ms.load());
  }
  Json report = {{"model", model},
                 {"num_requests", n},
                 {"input_len", input_len},
                 {"direct_ttft_ms", dist_ms(direct)},
                 {"http_ttft_ms", dist_ms(over_http)},
                 {"direct_added_ms", dist_ms(direct_added)},
                 {"http_added_ms", dist_ms(http_added)}};
  if (args.flag("json")) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    for (const char* k : {"direct_ttft_ms", "http_ttft_ms", "direct_added_ms", "http_added_ms"}) {
      const Json& d = report[k];
      std::printf("%-15s mean %7.3f  p10 %7.3f  p50 %7.3f  p90 %7.3f  p99 %7.3f\n", k,
                  d["mean"].get<double>(), d["p10"].get<double>(), d["p50"].get<double>(),
                  d["p90"].get<double>(), d["p99"].get<double>());
    }
  }
  http.stop();
  backend->shutdown();
  return 0;
}

}  // namespace tachyon::cli
