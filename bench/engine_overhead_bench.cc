// The engine's own cost per step: everything but the model's forward pass (scheduling,
// batch building, sampling, detokenizing, streaming). A synthetic model with a real
// vocabulary size (32000) fills logits cheaply, and its forward can spin for a set time
// to stand in for a real decoder; the real tokenizer of models/tiny-kjv-chat streams the
// text. Plain timing main, not run by CTest.
//
//   engine_overhead_bench [--model-dir DIR] [--forward-us US] [--tokens N]
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "engine/async_model.h"
#include "engine/tokenizer_adapter.h"

namespace tachyon {
namespace {

using Clock = std::chrono::steady_clock;

// Logits that depend on the last token and the position: peaked, so that sampling
// with top_p has a realistic head.
class SyntheticModel : public LanguageModel {
 public:
  SyntheticModel(int32_t vocab, int32_t forward_us) : vocab_(vocab), forward_us_(forward_us) {}
  int32_t vocab_size() const override { return vocab_; }
  int32_t max_seq_len() const override { return 4096; }
  size_t kv_bytes_per_block(int32_t block_size) const override { return block_size * 64; }
  void init_kv_cache(int32_t, int32_t) override {}
  void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>&) override {}
  Tensor forward(const ForwardBatch& b) override {
    const auto t0 = Clock::now();
    Tensor out = Tensor::empty({static_cast<int64_t>(b.logits_rows.size()), vocab_}, DType::kF32);
    for (size_t r = 0; r < b.logits_rows.size(); ++r) {
      const int32_t row = b.logits_rows[r];
      const uint32_t seed = static_cast<uint32_t>(b.token_ids[row]) * 2654435761u +
                            static_cast<uint32_t>(b.positions[row]) * 40503u;
      float* l = out.data<float>() + r * vocab_;
      uint32_t x = seed | 1;
      for (int32_t v = 0; v < vocab_; ++v) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        l[v] = static_cast<float>(x >> 8) * (6.0f / 16777216.0f);
      }
      // A few strong candidates among ordinary tokens.
      for (int k = 0; k < 4; ++k) l[1000 + (seed >> (k * 4)) % 20000] += 8.0f - k;
    }
    while (std::chrono::duration<double, std::micro>(Clock::now() - t0).count() < forward_us_) {
    }
    return out;
  }

 private:
  int32_t vocab_;
  int32_t forward_us_;
};

struct Run {
  double step_ms, forward_ms, schedule_ms, sample_ms, schedule_cpu_ms, sample_cpu_ms;
  int64_t steps, tokens;
};

Run run(const std::shared_ptr<const TextTokenizer>& tok, int32_t forward_us, int concurrency,
        int tokens, const GenerateConfig& base) {
  auto model = std::make_shared<SyntheticModel>(32000, forward_us);
  EngineConfig c;
  c.num_kv_blocks = 8192;
  c.max_num_seqs = 128;
  c.max_num_batched_tokens = 512;
  c.eos_token_ids = {2};
  AsyncModel engine(model, tok, c);
  std::mt19937 rng(1);
  // Warm up, then measure a steady decode: all requests submitted together.
  std::vector<std::shared_ptr<RequestStream>> streams;
  const EngineStats before = engine.stats();
  for (int i = 0; i < concurrency; ++i) {
    GenerateRequest r;
    for (int k = 0; k < 64; ++k) r.prompt_ids.push_back(1000 + static_cast<int32_t>(rng() % 20000));
    r.config = base;
    r.config.max_new_tokens = tokens;
    r.config.ignore_eos = true;
    r.config.random_seed = static_cast<uint64_t>(i);
    streams.push_back(engine.submit(std::move(r)));
  }
  int64_t generated = 0;
  for (auto& s : streams) generated += s->wait().timings.output_len;
  const EngineStats after = engine.stats();
  return {after.step_ms - before.step_ms,
          after.forward_ms - before.forward_ms,
          after.schedule_ms - before.schedule_ms,
          after.sample_ms - before.sample_ms,
          after.schedule_cpu_ms - before.schedule_cpu_ms,
          after.sample_cpu_ms - before.sample_cpu_ms,
          after.num_steps - before.num_steps,
          generated};
}

}  // namespace
}  // namespace tachyon

int main(int argc, char** argv) {
  using namespace tachyon;
  std::string dir = "models/tiny-kjv-chat";
  int32_t forward_us = 0;
  int tokens = 64;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    if (!std::strcmp(argv[i], "--model-dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--forward-us")) forward_us = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoi(argv[i + 1]);
  }
  std::shared_ptr<const TextTokenizer> tok;
  if (dir != "none") tok = make_text_tokenizer(Tokenizer::load(dir));
  GenerateConfig greedy;
  greedy.temperature = 0;
  GenerateConfig sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampled.top_k = 50;
  GenerateConfig full;
  full.temperature = 1.0f;
  GenerateConfig penalties = sampled;
  penalties.repetition_penalty = 1.1f;
  penalties.frequency_penalty = 0.2f;
  GenerateConfig logprobs = greedy;
  logprobs.return_logprobs = true;
  logprobs.top_logprobs = 5;
  std::printf("engine overhead per step (synthetic model, vocab 32000, forward spin %d us)\n",
              forward_us);
  std::printf("%-10s %5s %6s %10s %10s %10s %10s %9s | %14s %14s %10s\n", "config", "seqs", "steps",
              "step us", "fwd us", "sched us", "sample us", "ovh/tok", "sched cpu us",
              "sample cpu us", "cpu/tok");
  const std::pair<const char*, GenerateConfig> configs[] = {{"greedy", greedy},
                                                            {"top-p/k", sampled},
                                                            {"full", full},
                                                            {"penalties", penalties},
                                                            {"logprobs", logprobs}};
  for (const auto& [name, cfg] : configs) {
    if (!only.empty() && only != name) continue;
    for (int conc : {1, 8, 32, 64}) {
      const Run r = run(tok, forward_us, conc, tokens, cfg);
      const double s = static_cast<double>(r.steps);
      const double tok = static_cast<double>(r.tokens);
      std::printf("%-10s %5d %6lld %10.1f %10.1f %10.1f %10.1f %9.2f | %14.1f %14.1f %10.2f\n",
                  name, conc, static_cast<long long>(r.steps), 1000 * r.step_ms / s,
                  1000 * r.forward_ms / s, 1000 * r.schedule_ms / s, 1000 * r.sample_ms / s,
                  1000 * (r.step_ms - r.forward_ms) / tok, 1000 * r.schedule_cpu_ms / s,
                  1000 * r.sample_cpu_ms / s, 1000 * (r.schedule_cpu_ms + r.sample_cpu_ms) / tok);
    }
  }
  return 0;
}
