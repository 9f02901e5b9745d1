// `tachyon bench`: offline serving benchmark of the engine.
//   tachyon bench --model DIR [--num-requests N] [--input-len L] [--output-len O]
//                 [--range-ratio R] [--concurrency C | --request-rate R] [--prompts FILE]
//                 [--temperature T] [--seed S] [--shared-prefix-len P] [--multi-turn K]
//                 [--json] [engine flags]
//   tachyon bench --url http://HOST:PORT [...]   the serving mode (see bench_serving.h)
// Prompts are random token ids with lengths uniform in [L(1-R), L(1+R)] (or the lines of
// a JSONL file: {"prompt": ...} / {"prompt_ids": [...]}), all opening with one random
// prefix of P tokens when --shared-prefix-len is given; every request generates exactly
// its output length (ignore_eos). With --multi-turn K, N conversations of K turns: each
// turn's prompt is the previous turn's, the ids it produced and a new random part
// (cli/bench_workload.h); a conversation's turns run one after another. Closed loop with
// C requests (conversations) in flight, or Poisson arrivals at R requests (conversations)
// per second. Reports throughput (input, output, total tokens/s), TTFT, inter-token
// latency and end-to-end latency percentiles, the prompt tokens the engine took from its
// prefix cache, the TTFT of first and later turns, the engine's step time split
// (scheduling and sampling overhead vs the forward pass) and, with speculative decoding
// (--speculative), the drafts verified and accepted.
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
#include "cli/bench_report.h"
#include "cli/bench_workload.h"
#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "cli/model_dir.h"
#include "core/error.h"
#include "core/json.h"

namespace tachyon::cli {
namespace {

using Clock = std::chrono::steady_clock;

PromptShape prompt_shape(const SettingValues& args, const EngineBundle& b) {
  PromptShape shape;
  // Ordinary tokens only: skip the first few ids (special tokens in most vocabularies).
  shape.high_token = b.engine->vocab_size() - 1;
  shape.low_token = std::min(shape.high_token, 16);
  shape.input_len = args.integer("input-len");
  shape.range_ratio = args.number("range-ratio");
  shape.shared_prefix_len = args.integer("shared-prefix-len");
  return shape;
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
  return make_random_prompts(prompt_shape(args, b), n, rng);
}

// Threads running conversations that arrive by --request-rate: an arrival waits while all
// are busy.
constexpr int64_t kMaxConversationThreads = 1024;

constexpr const char* kUsage =
    "usage: tachyon bench [--model DIR] [--num-requests N] [--input-len L] [--output-len O]\n"
    "                     [--concurrency C | --request-rate R] [--shared-prefix-len P]\n"
    "                     [--multi-turn K] [--json] [flags]\n"
    "       tachyon bench --url http://HOST:PORT [...]   the serving benchmark (bench-serving)\n\n"
    "Offline benchmark of the engine: random prompts (or --prompts FILE.jsonl), each request\n"
    "generating exactly its output length; reports throughput, TTFT, ITL, TPOT and\n"
    "end-to-end latency percentiles, the prompt tokens taken from the prefix cache and the\n"
    "engine's step time split. --shared-prefix-len P opens every prompt with the same P\n"
    "tokens; --multi-turn K runs N conversations of K turns, each turn's prompt the last\n"
    "one's with its output and --input-len new tokens (TTFT of first vs later turns).\n"
    "With --lora NAME=DIR ..., request i runs the i-th adapter (mod their number).\n";

}  // namespace

int cmd_bench(const CommandArgs& argv) {
  // Serving mode: with --url the same benchmark runs against a running server over HTTP.
  for (const std::string& a : argv)
    if (a == "--url" || a.rfind("--url=", 0) == 0) return cmd_bench_serving(argv);
  const auto parsed = parse_command("bench", argv, kUsage);
  if (!parsed) return 0;
  const SettingValues& args = *parsed;
  const int64_t n = args.integer("num-requests");  // conversations with --multi-turn
  const int64_t out_len = args.integer("output-len");
  const int64_t turns = args.integer("multi-turn");
  const int64_t prefix_len = args.integer("shared-prefix-len");
  const bool open_loop = args.given("request-rate");
  if (args.given("concurrency") && open_loop)
    raise<InvalidArgument>("give --concurrency or --request-rate, not both");
  if (args.given("prompts") && (prefix_len > 0 || turns > 1))
    raise<InvalidArgument>(
        "--prompts takes its prompts from the file: give it without --shared-prefix-len and "
        "--multi-turn");
  const int64_t concurrency =
      args.given("concurrency") ? args.integer("concurrency") : std::min<int64_t>(n, 32);
  const double rate = open_loop ? args.number("request-rate") : 0.0;
  if (concurrency < 1) raise<InvalidArgument>("--concurrency must be >= 1");
  const bool json = args.flag("json");

  // With LoRA adapters, request i runs adapter i mod their number.
  const LoraOptions lora = lora_options(args);
  EngineBundle b = open_engine(resolve_model_dir(args.str("model")), args, 0, lora);
  std::vector<int32_t> adapter_ids;
  if (b.adapters)
    for (const AdapterInfo& a : lora.adapters)
      adapter_ids.push_back(b.adapters->acquire(a.name)->id());
  std::mt19937_64 rng(static_cast<uint64_t>(args.integer("seed")));
  std::vector<Conversation> convs;
  if (turns > 1) {
    const PromptShape shape = prompt_shape(args, b);
    check_fits(shape, turns, out_len, b.engine->max_seq_len());
    convs = make_conversations(shape, n, turns, rng);
  } else {
    if (!args.given("prompts"))
      check_fits(prompt_shape(args, b), 1, out_len, b.engine->max_seq_len());
    for (auto& p : make_prompts(args, b, n, rng)) convs.emplace_back(Conversation({std::move(p)}));
  }
  GenerateConfig cfg;
  cfg.temperature = static_cast<float>(args.number("temperature"));
  cfg.ignore_eos = true;
  // Structured output: every request under the same constraint (its mask cost); a
  // grammar that completes ends its request before the output length.
  cfg.constraint = constraint_flags(args);

  // Warm-up: prompts of random tokens from a seed of their own, so that they share no
  // prefix with the workload's.
  if (const int64_t warmup = args.integer("warmup"); warmup > 0) {
    std::mt19937_64 wrng(~static_cast<uint64_t>(args.integer("seed")));
    const size_t len = convs.front().prompt().size();
    std::vector<std::shared_ptr<RequestStream>> ws;
    for (int64_t i = 0; i < warmup; ++i) {
      GenerateRequest r;
      for (size_t k = 0; k < len; ++k)
        r.prompt_ids.push_back(
            static_cast<int32_t>(wrng() % static_cast<uint64_t>(b.engine->vocab_size())));
      r.config = cfg;
      r.config.max_new_tokens = static_cast<int32_t>(std::min<int64_t>(out_len, 8));
      ws.push_back(b.engine->submit(std::move(r)));
    }
    for (auto& w : ws)
      if (const auto r = w->wait(); r.error)
        raise<Internal>("warm-up request: {}", r.error->message);
  }
  // Requests by conversation and turn: conversation i's turn k is request i * turns + k.
  const int64_t total = n * turns;
  std::vector<GenerateResult> results(static_cast<size_t>(total));
  // When each request finished: the run ends with the last one, not at the progress
  // loop's next wake-up (up to 250 ms later).
  std::vector<Clock::time_point> finished(static_cast<size_t>(total));
  std::atomic<int64_t> next{0}, done{0};
  const EngineStats before = b.engine->stats();
  const auto t0 = Clock::now();
  auto request = [&](int64_t i) {
    const std::vector<int32_t>& prompt = convs[static_cast<size_t>(i / turns)].prompt();
    GenerateConfig c = cfg;
    const int64_t room = b.engine->max_seq_len() - static_cast<int64_t>(prompt.size());
    c.max_new_tokens = static_cast<int32_t>(std::max<int64_t>(1, std::min(out_len, room)));
    c.random_seed = static_cast<uint64_t>(i);
    GenerateRequest r{prompt, c};
    if (!adapter_ids.empty()) r.adapter = adapter_ids[static_cast<size_t>(i) % adapter_ids.size()];
    return r;
  };
  // Runs conversation i's turns one after another; a failed turn fails the ones after it.
  auto converse = [&](int64_t i) {
    Conversation& c = convs[static_cast<size_t>(i)];
    while (!c.done()) {
      const size_t r = static_cast<size_t>(i * turns + c.turn());
      results[r] = b.engine->submit(request(static_cast<int64_t>(r)))->wait();
      finished[r] = Clock::now();
      ++done;
      if (results[r].error || results[r].sequences.empty()) {
        for (int64_t k = c.turn() + 1; k < turns; ++k) {
          const size_t later = static_cast<size_t>(i * turns + k);
          results[later].error = ErrorInfo{ErrorCode::kInternal, "an earlier turn failed"};
          finished[later] = finished[r];
          ++done;
        }
        return;
      }
      c.answer(results[r].sequences[0].output_ids);
    }
  };
  std::vector<std::thread> workers;
  // Read by the workers, so declared outside the blocks that fill them.
  std::vector<Clock::time_point> arrival;  // of each conversation
  std::vector<std::shared_ptr<RequestStream>> streams;
  if (open_loop && turns == 1) {
    // Poisson arrivals from one thread; results are read after all are submitted (the
    // engine measures TTFT and token gaps itself).
    std::exponential_distribution<double> gap(rate);
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
    // Closed loop: `concurrency` conversations at a time. Open loop (conversations of
    // several turns): each starts at its Poisson arrival time, on one of up to
    // kMaxConversationThreads threads taking them in order.
    arrival.assign(static_cast<size_t>(n), t0);
    if (open_loop) {
      std::exponential_distribution<double> gap(rate);
      for (int64_t i = 1; i < n; ++i)
        arrival[static_cast<size_t>(i)] =
            arrival[static_cast<size_t>(i - 1)] +
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
    const int64_t threads = open_loop ? std::min(n, kMaxConversationThreads) : concurrency;
    for (int64_t w = 0; w < threads; ++w) {
      workers.emplace_back([&] {
        for (int64_t i = next++; i < n; i = next++) {
          std::this_thread::sleep_until(arrival[static_cast<size_t>(i)]);
          converse(i);
        }
      });
    }
  }
  // Progress: a bar on a terminal, a line per 10% otherwise.
  const bool tty = isatty(fileno(stderr));
  int64_t last_decile = 0;
  while (done.load() < total) {
    std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 100 : 250));
    const int64_t d = done.load();
    if (tty) {
      const int width = 40;
      const int fill = static_cast<int>(width * d / total);
      std::fprintf(stderr, "\r[%s%s] %lld/%lld",
                   std::string(static_cast<size_t>(fill), '#').c_str(),
                   std::string(static_cast<size_t>(width - fill), ' ').c_str(),
                   static_cast<long long>(d), static_cast<long long>(total));
    } else if (d * 10 / total > last_decile) {
      last_decile = d * 10 / total;
      std::fprintf(stderr, "bench: %lld/%lld requests done\n", static_cast<long long>(d),
                   static_cast<long long>(total));
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  for (auto& w : workers) w.join();
  const double wall =
      std::chrono::duration<double>(*std::max_element(finished.begin(), finished.end()) - t0)
          .count();
  const EngineStats after = b.engine->stats();

  int64_t in_tokens = 0, out_tokens = 0, failed = 0, cached_tokens = 0;
  std::vector<double> ttft, itl, e2e, tpot;
  std::vector<double> ttft_cached, ttft_computed;  // prompts partly from the cache, or not
  std::vector<std::vector<double>> ttft_by_turn(static_cast<size_t>(turns));
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerateResult& r = results[i];
    if (r.error) {
      ++failed;
      continue;
    }
    in_tokens += r.timings.input_len;
    out_tokens += r.timings.output_len;
    cached_tokens += r.timings.reuse_len;
    ttft.push_back(r.timings.first_token_ms);
    (r.timings.reuse_len > 0 ? ttft_cached : ttft_computed).push_back(r.timings.first_token_ms);
    ttft_by_turn[i % static_cast<size_t>(turns)].push_back(r.timings.first_token_ms);
    e2e.push_back(r.timings.total_ms);
    itl.insert(itl.end(), r.timings.token_gaps_ms.begin(), r.timings.token_gaps_ms.end());
    if (r.timings.output_len > 1)
      tpot.push_back((r.timings.total_ms - r.timings.first_token_ms) / (r.timings.output_len - 1));
  }
  const double steps = static_cast<double>(after.num_steps - before.num_steps);
  const double step_ms = after.step_ms - before.step_ms;
  const double forward_ms = after.forward_ms - before.forward_ms;
  Json j = {
      {"num_requests", total},
      {"shared_prefix_len", prefix_len},
      {"multi_turn", turns},
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
  // The runner's own counts, read once every request has ended (the loop is idle).
  if (const auto* runner = dynamic_cast<const ModelRunner*>(b.model.get()))
    j["model"] = {{"graph_replays", runner->graph_replays()},
                  {"graph_records", runner->graph_records()},
                  {"lora_swaps", runner->lora_swaps()}};
  j["prompt_cache"] = {
      {"cached_prompt_tokens", cached_tokens},
      {"prompt_tokens", in_tokens},
      {"requests_cached", ttft_cached.size()},
      {"ttft_p50_ms_cached",
       ttft_cached.empty() ? Json(nullptr) : Json(percentile(ttft_cached, 50))},
      {"ttft_p50_ms_computed",
       ttft_computed.empty() ? Json(nullptr) : Json(percentile(ttft_computed, 50))},
      {"fraction",
       in_tokens > 0 ? static_cast<double>(cached_tokens) / static_cast<double>(in_tokens) : 0.0}};
  if (turns > 1) {
    j["conversations"] = n;
    add_turn_report(ttft_by_turn, &j);
  }
  if (b.engine->engine().config().proposer) j["speculative"] = speculation_report(before, after);
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    const Json& e = j["engine"];
    std::printf("requests %lld (failed %lld), %.2f s\n", static_cast<long long>(total),
                static_cast<long long>(failed), wall);
    if (prefix_len > 0)
      std::printf("workload every prompt opens with the same %lld tokens, then its own %lld\n",
                  static_cast<long long>(prefix_len),
                  static_cast<long long>(args.integer("input-len")));
    if (turns > 1)
      std::printf(
          "workload %lld conversations of %lld turns, each turn adding the last output and "
          "%lld new tokens\n",
          static_cast<long long>(n), static_cast<long long>(turns),
          static_cast<long long>(args.integer("input-len")));
    std::printf("cached prompt tokens: %lld of %lld (%.1f%%)\n",
                static_cast<long long>(cached_tokens), static_cast<long long>(in_tokens),
                100 * j["prompt_cache"]["fraction"].get<double>());
    if (!ttft_cached.empty() && !ttft_computed.empty())
      std::printf(
          "ttft p50 of the %zu requests with a cached prefix %.2f ms | of the %zu without %.2f "
          "ms\n",
          ttft_cached.size(), percentile(ttft_cached, 50), ttft_computed.size(),
          percentile(ttft_computed, 50));
    if (turns > 1) {
      std::printf("ttft p50 first turn %.2f ms | later turns %.2f ms | by turn",
                  j["ttft_p50_ms_first_turn"].get<double>(),
                  j["ttft_p50_ms_later_turns"].get<double>());
      for (const Json& t : j["ttft_p50_ms_by_turn"])
        t.is_null() ? std::printf(" -") : std::printf(" %.2f", t.get<double>());
      std::printf("\n");
    }
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
    if (j.contains("speculative")) {
      const Json& s = j["speculative"];
      std::printf(
          "speculative %lld verify steps: %lld draft tokens, %lld accepted (%.1f%%), %.2f tokens "
          "per verify step\n",
          static_cast<long long>(s["verify_steps"].get<int64_t>()),
          static_cast<long long>(s["draft_tokens"].get<int64_t>()),
          static_cast<long long>(s["accepted_tokens"].get<int64_t>()),
          100 * s["acceptance_rate"].get<double>(), s["mean_tokens_per_verify_step"].get<double>());
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace tachyon::cli
