// The engine's own cost per step: everything but the model's forward pass (scheduling,
// batch building, sampling, detokenizing, streaming). A synthetic model with a real
// vocabulary size (32000) fills logits cheaply, and its forward can spin for a set time
// to stand in for a real decoder; the real tokenizer of models/tiny-kjv-chat streams the
// text. Plain timing main, not run by CTest.
//
//   engine_overhead_bench [--model-dir DIR] [--forward-us US] [--tokens N]
//                         [--serving N [--prompt P]]   N requests of P prompt tokens at once,
//                                                      tokens chosen "on the device"
//                         [--prefix-caching 0|1]       the prefix cache's bookkeeping (on)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/async_model.h"
#include "frontend/text_engine.h"

namespace tachyon {
namespace {

using Clock = std::chrono::steady_clock;

// Logits that depend on the last token and the position: peaked, so that sampling
// with top_p has a realistic head.
class SyntheticModel : public LanguageModel {
 public:
  SyntheticModel(int32_t vocab, int32_t forward_us) : vocab_(vocab), forward_us_(forward_us) {}
  int32_t vocab_size() const override { return vocab_; }
  int32_t forward_us() const { return forward_us_; }
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

// Tokens chosen "on the device": forward_sample returns ids only, as the GPU path does
// with device sampling (no logits cross to the host).
class DeviceSamplingModel : public SyntheticModel {
 public:
  using SyntheticModel::SyntheticModel;
  bool samples_on_device() const override { return true; }
  ForwardOutput forward_sample(const ForwardBatch& b) override {
    bool all_device = !b.sampling.rows.empty();
    for (const auto& r : b.sampling.rows) all_device &= r.mode == RowSampling::Mode::kDevice;
    if (!all_device) return SyntheticModel::forward_sample(b);
    const auto t0 = Clock::now();
    ForwardOutput out;
    out.tokens.reserve(b.logits_rows.size());
    for (int32_t row : b.logits_rows) {
      const uint32_t x = static_cast<uint32_t>(b.token_ids[row]) * 2654435761u +
                         static_cast<uint32_t>(b.positions[row]) * 40503u;
      out.tokens.push_back(1000 + static_cast<int32_t>(x % 20000));
    }
    while (std::chrono::duration<double, std::micro>(Clock::now() - t0).count() < forward_us())
      ;
    return out;
  }
};

struct Run {
  double step_ms, forward_ms, schedule_ms, sample_ms, schedule_cpu_ms, sample_cpu_ms;
  int64_t steps, tokens;
};

// Options of one run: the serving shape (--serving) uses the device-sampling model,
// long prompts and every request at once, like `tachyon bench` on a GPU.
struct RunShape {
  int concurrency = 1;
  int tokens = 64;
  int prompt = 64;
  bool device_sampling = false;
  bool prefix_caching = true;
};

Run run(const std::shared_ptr<const TextTokenizer>& tok, int32_t forward_us, const RunShape& sh,
        const GenerateConfig& base) {
  std::shared_ptr<LanguageModel> model;
  if (sh.device_sampling)
    model = std::make_shared<DeviceSamplingModel>(32000, forward_us);
  else
    model = std::make_shared<SyntheticModel>(32000, forward_us);
  EngineConfig c;
  c.max_num_seqs = std::max(128, sh.concurrency);
  c.max_num_batched_tokens = std::max(512, sh.device_sampling ? 8192 : 512);
  c.num_kv_blocks = std::max(8192, sh.concurrency * ((sh.prompt + sh.tokens) / 16 + 2));
  c.eos_token_ids = {2};
  c.prefix_caching = sh.prefix_caching;
  TextEngine engine(model, tok, c);
  std::mt19937 rng(1);
  // All requests submitted together; the run covers their prefill and decode.
  std::vector<std::shared_ptr<RequestStream>> streams;
  const EngineStats before = engine.stats();
  for (int i = 0; i < sh.concurrency; ++i) {
    GenerateRequest r;
    for (int k = 0; k < sh.prompt; ++k)
      r.prompt_ids.push_back(1000 + static_cast<int32_t>(rng() % 20000));
    r.config = base;
    r.config.max_new_tokens = sh.tokens;
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
  int serving = 0;  // > 0: that many requests at once, tokens chosen "on the device"
  int prompt = 1000;
  bool prefix_caching = true;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    if (!std::strcmp(argv[i], "--model-dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--forward-us")) forward_us = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--serving")) serving = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--prompt")) prompt = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--prefix-caching")) prefix_caching = std::atoi(argv[i + 1]) != 0;
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
  std::printf(
      "engine overhead per step (synthetic model, vocab 32000, forward spin %d us, prefix cache "
      "%s)\n",
      forward_us, prefix_caching ? "on" : "off");
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
    std::vector<RunShape> shapes;
    if (serving > 0)
      shapes.push_back({serving, tokens, prompt, true, prefix_caching});
    else
      for (int conc : {1, 8, 32, 64}) shapes.push_back({conc, tokens, 64, false, prefix_caching});
    for (const RunShape& sh : shapes) {
      const int conc = sh.concurrency;
      const Run r = run(tok, forward_us, sh, cfg);
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
