// `tachyon bench`: offline serving benchmark of the engine.
//   tachyon bench --model DIR [--num-requests N] [--input-len L] [--output-len O]
//                 [--range-ratio R] [--concurrency C | --request-rate R] [--prompts FILE]
//                 [--temperature T] [--seed S] [--json] [engine flags]
//   tachyon bench --url http://HOST:PORT [...]   the serving mode (see bench_serving.h)
// Prompts are random token ids with lengths uniform in [L(1-R), L(1+R)] (or the lines of
// a JSONL file: {"prompt": ...} / {"prompt_ids": [...]}); every request generates
// exactly its output length (ignore_eos). Closed loop with C requests in flight, or
// Poisson arrivals at R requests/s. Reports throughput (input, output, total tokens/s),
// TTFT, inter-token latency and end-to-end latency percentiles, and the engine's step
// time split (scheduling and sampling overhead vs the forward pass).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "cli/model_dir.h"
#include "core/error.h"
#include "core/json.h"

namespace tachyon::cli {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Json dist(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  if (!v.empty()) mean /= static_cast<double>(v.size());
  return {{"mean", mean},
          {"p50", percentile(v, 50)},
          {"p90", percentile(v, 90)},
          {"p99", percentile(v, 99)}};
}

std::vector<std::vector<int32_t>> make_prompts(const SettingValues& args, const EngineBundle& b,
                                               int64_t n, std::mt19937_64& rng) {
  std::vector<std::vector<int32_t>> prompts;
  if (args.given("prompts")) {
    const std::string file = args.str("prompts");
    std::ifstream in(file);
    if (!in) raise<NotFound>("cannot open --prompts {}", file);
    std::string line;
    std::vector<std::vector<int32_t>> all;
    while (std::getline(in, line))
      if (line.find_first_not_of(" \t\r") != std::string::npos)
        all.push_back(prompt_from_json(parse_json(line, file), b.tokenizer.get()));
    if (all.empty()) raise<InvalidArgument>("--prompts {} has no prompts", file);
    for (int64_t i = 0; i < n; ++i) prompts.push_back(all[static_cast<size_t>(i) % all.size()]);
    return prompts;
  }
  const int64_t len = args.integer("input-len");
  const double ratio = args.number("range-ratio");
  const int32_t vocab = b.engine->vocab_size();
  // Ordinary tokens only: skip the first few ids (special tokens in most vocabularies).
  const int32_t low = std::min(vocab - 1, 16);
  std::uniform_int_distribution<int32_t> token(low, vocab - 1);
  std::uniform_int_distribution<int64_t> length(
      std::max<int64_t>(1, static_cast<int64_t>(std::floor(len * (1 - ratio)))),
      static_cast<int64_t>(std::ceil(len * (1 + ratio))));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(length(rng)));
    for (auto& t : p) t = token(rng);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

constexpr const char* kUsage =
    "usage: tachyon bench [--model DIR] [--num-requests N] [--input-len L] [--output-len O]\n"
    "                     [--concurrency C | --request-rate R] [--json] [flags]\n"
    "       tachyon bench --url http://HOST:PORT [...]   the serving benchmark (bench-serving)\n\n"
    "Offline benchmark of the engine: random prompts (or --prompts FILE.jsonl), each request\n"
    "generating exactly its output length; reports throughput, TTFT, ITL, TPOT and\n"
    "end-to-end latency percentiles and the engine's step time split.\n";

}  // namespace

int cmd_bench(const CommandArgs& argv) {
  // Serving mode: with --url the same benchmark runs against a running server over HTTP.
  for (const std::string& a : argv)
    if (a == "--url" || a.rfind("--url=", 0) == 0) return cmd_bench_serving(argv);
  const auto parsed = parse_command("bench", argv, kUsage);
  if (!parsed) return 0;
  const SettingValues& args = *parsed;
  const int64_t n = args.integer("num-requests");
  const int64_t out_len = args.integer("output-len");
  const bool open_loop = args.given("request-rate");
  if (args.given("concurrency") && open_loop)
    raise<InvalidArgument>("give --concurrency or --request-rate, not both");
  const int64_t concurrency =
      args.given("concurrency") ? args.integer("concurrency") : std::min<int64_t>(n, 32);
  const double rate = open_loop ? args.number("request-rate") : 0.0;
  if (concurrency < 1) raise<InvalidArgument>("--concurrency must be >= 1");
  const bool json = args.flag("json");

  EngineBundle b = open_engine(resolve_model_dir(args.str("model")), args);
  std::mt19937_64 rng(static_cast<uint64_t>(args.integer("seed")));
  const auto prompts = make_prompts(args, b, n, rng);
  GenerateConfig cfg;
  cfg.temperature = static_cast<float>(args.number("temperature"));
  cfg.ignore_eos = true;

  std::vector<GenerateResult> results(static_cast<size_t>(n));
  // When each request finished: the run ends with the last one, not at the progress
  // loop's next wake-up (up to 250 ms later).
  std::vector<Clock::time_point> finished(static_cast<size_t>(n));
  std::atomic<int64_t> next{0}, done{0};
  const EngineStats before = b.engine->stats();
  const auto t0 = Clock::now();
  auto request = [&](int64_t i) {
    GenerateConfig c = cfg;
    const int64_t room = b.engine->max_seq_len() - static_cast<int64_t>(prompts[i].size());
    c.max_new_tokens = static_cast<int32_t>(std::max<int64_t>(1, std::min(out_len, room)));
    c.random_seed = static_cast<uint64_t>(i);
    return GenerateRequest{prompts[static_cast<size_t>(i)], c};
  };
  std::vector<std::thread> workers;
  if (open_loop) {
    // Poisson arrivals from one thread; results are read after all are submitted (the
    // engine measures TTFT and token gaps itself).
    std::exponential_distribution<double> gap(rate);
    std::vector<std::shared_ptr<RequestStream>> streams;
    auto when = t0;
    for (int64_t i = 0; i < n; ++i) {
      std::this_thread::sleep_until(when);
      streams.push_back(b.engine->submit(request(i)));
      when += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
    workers.emplace_back([&] {
      for (int64_t i = 0; i < n; ++i) {
        results[static_cast<size_t>(i)] = streams[static_cast<size_t>(i)]->wait();
        finished[static_cast<size_t>(i)] = Clock::now();
        ++done;
      }
    });
  } else {
    for (int64_t w = 0; w < concurrency; ++w) {
      workers.emplace_back([&] {
        for (int64_t i = next++; i < n; i = next++) {
          results[static_cast<size_t>(i)] = b.engine->submit(request(i))->wait();
          finished[static_cast<size_t>(i)] = Clock::now();
          ++done;
        }
      });
    }
  }
  // Progress: a bar on a terminal, a line per 10% otherwise.
  const bool tty = isatty(fileno(stderr));
  int64_t last_decile = 0;
  while (done.load() < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 100 : 250));
    const int64_t d = done.load();
    if (tty) {
      const int width = 40;
      const int fill = static_cast<int>(width * d / n);
      std::fprintf(stderr, "\r[%s%s] %lld/%lld",
                   std::string(static_cast<size_t>(fill), '#').c_str(),
                   std::string(static_cast<size_t>(width - fill), ' ').c_str(),
                   static_cast<long long>(d), static_cast<long long>(n));
    } else if (d * 10 / n > last_decile) {
      last_decile = d * 10 / n;
      std::fprintf(stderr, "bench: %lld/%lld requests done\n", static_cast<long long>(d),
                   static_cast<long long>(n));
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  for (auto& w : workers) w.join();
  const double wall =
      std::chrono::duration<double>(*std::max_element(finished.begin(), finished.end()) - t0)
          .count();
  const EngineStats after = b.engine->stats();

  int64_t in_tokens = 0, out_tokens = 0, failed = 0;
  std::vector<double> ttft, itl, e2e, tpot;
  for (const auto& r : results) {
    if (r.error) {
      ++failed;
      continue;
    }
    in_tokens += r.timings.input_len;
    out_tokens += r.timings.output_len;
    ttft.push_back(r.timings.first_token_ms);
    e2e.push_back(r.timings.total_ms);
    itl.insert(itl.end(), r.timings.token_gaps_ms.begin(), r.timings.token_gaps_ms.end());
    if (r.timings.output_len > 1)
      tpot.push_back((r.timings.total_ms - r.timings.first_token_ms) / (r.timings.output_len - 1));
  }
  const double steps = static_cast<double>(after.num_steps - before.num_steps);
  const double step_ms = after.step_ms - before.step_ms;
  const double forward_ms = after.forward_ms - before.forward_ms;
  Json j = {
      {"num_requests", n},
      {"failed", failed},
      {"concurrency", open_loop ? Json(nullptr) : Json(concurrency)},
      {"request_rate", open_loop ? Json(rate) : Json(nullptr)},
      {"duration_s", wall},
      {"input_tokens", in_tokens},
      {"output_tokens", out_tokens},
      {"input_tokens_per_s", in_tokens / wall},
      {"output_tokens_per_s", out_tokens / wall},
      {"total_tokens_per_s", (in_tokens + out_tokens) / wall},
      {"ttft_ms", dist(ttft)},
      {"itl_ms", dist(itl)},
      {"tpot_ms", dist(tpot)},
      {"e2e_ms", dist(e2e)},
      {"engine",
       {{"steps", steps},
        {"step_ms_mean", steps > 0 ? step_ms / steps : 0},
        {"forward_ms_mean", steps > 0 ? forward_ms / steps : 0},
        {"schedule_ms_mean", steps > 0 ? (after.schedule_ms - before.schedule_ms) / steps : 0},
        {"sample_ms_mean", steps > 0 ? (after.sample_ms - before.sample_ms) / steps : 0},
        {"overhead_fraction", step_ms > 0 ? 1.0 - forward_ms / step_ms : 0},
        {"preemptions", after.num_preemptions - before.num_preemptions},
        {"swap_outs", after.num_swap_outs - before.num_swap_outs},
        {"tokens_computed", after.tokens_computed - before.tokens_computed},
        {"tokens_discarded", after.tokens_discarded - before.tokens_discarded},
        {"overlapped_steps", after.overlapped_steps - before.overlapped_steps},
        {"kv_blocks", after.num_kv_blocks},
        {"swap_blocks", after.num_swap_blocks},
        {"block_size", after.block_size}}},
  };
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    const Json& e = j["engine"];
    std::printf("requests %lld (failed %lld), %.2f s\n", static_cast<long long>(n),
                static_cast<long long>(failed), wall);
    std::printf("throughput  input %.1f tok/s | output %.1f tok/s | total %.1f tok/s\n",
                in_tokens / wall, out_tokens / wall, (in_tokens + out_tokens) / wall);
    for (const char* k : {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"})
      std::printf("%-8s mean %8.2f | p50 %8.2f | p90 %8.2f | p99 %8.2f\n", k,
                  j[k]["mean"].get<double>(), j[k]["p50"].get<double>(), j[k]["p90"].get<double>(),
                  j[k]["p99"].get<double>());
    std::printf(
        "engine   %.0f steps, %.3f ms/step: forward %.3f, schedule %.3f, sample %.3f "
        "(overhead %.2f%%), %lld preemptions (%lld swapped out), %lld tokens computed (%lld "
        "discarded), %lld steps queued ahead\n",
        e["steps"].get<double>(), e["step_ms_mean"].get<double>(),
        e["forward_ms_mean"].get<double>(), e["schedule_ms_mean"].get<double>(),
        e["sample_ms_mean"].get<double>(), 100 * e["overhead_fraction"].get<double>(),
        static_cast<long long>(e["preemptions"].get<int64_t>()),
        static_cast<long long>(e["swap_outs"].get<int64_t>()),
        static_cast<long long>(e["tokens_computed"].get<int64_t>()),
        static_cast<long long>(e["tokens_discarded"].get<int64_t>()),
        static_cast<long long>(e["overlapped_steps"].get<int64_t>()));
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace tachyon::cli
