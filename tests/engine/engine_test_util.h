// Helpers for the engine tests: engines over the fake model and reference generation
// computed from the fake model's logits alone (no cache, no batching).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/async_model.h"
#include "engine/beam_search.h"
#include "engine/fake_model.h"
#include "engine/sampler.h"

namespace tachyon::testing {

struct TestEngine {
  std::shared_ptr<FakeModel> model;
  std::unique_ptr<AsyncModel> engine;
};

// A greedy request of max_new tokens.
inline GenerateConfig greedy(int32_t max_new) {
  GenerateConfig c;
  c.temperature = 0.0f;
  c.max_new_tokens = max_new;
  return c;
}

// An engine over a fixed number of small KV blocks.
inline EngineConfig small_engine(int32_t blocks, int32_t block_size = 4) {
  EngineConfig c;
  c.num_kv_blocks = blocks;
  c.block_size = block_size;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 128;
  return c;
}

inline TestEngine make_engine(const FakeModelOptions& o, EngineConfig c) {
  TestEngine t;
  t.model = std::make_shared<FakeModel>(o);
  if (c.eos_token_ids.empty()) c.eos_token_ids = {o.eos};
  t.engine = std::make_unique<AsyncModel>(t.model, c);
  return t;
}

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t len, int32_t vocab,
                                          int32_t avoid = -1) {
  std::vector<int32_t> p;
  while (static_cast<int32_t>(p.size()) < len) {
    const int32_t t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    if (t != avoid) p.push_back(t);
  }
  return p;
}

struct RefOutput {
  std::vector<int32_t> ids;
  FinishReason reason = FinishReason::kLength;
  std::vector<float> logprobs;
};

// What one sampled sequence must produce: the Sampler on reference logits, keyed like
// the engine keys it (seed, sequence index, step).
inline RefOutput reference_generate(const std::vector<int32_t>& prompt, const GenerateConfig& cfg,
                                    const FakeModelOptions& o, uint64_t seed, int32_t index,
                                    int32_t max_new) {
  Sampler sampler;
  std::vector<int32_t> tokens = prompt;
  std::vector<float> logits(static_cast<size_t>(o.vocab));
  const std::vector<int32_t> eos = {o.eos};
  RefOutput out;
  for (int32_t step = 0;; ++step) {
    FakeModel::reference_logits(tokens, o, logits.data());
    SamplingContext ctx;
    ctx.config = &cfg;
    ctx.tokens = tokens;
    ctx.prompt_len = static_cast<int32_t>(prompt.size());
    ctx.eos_ids = eos;
    ctx.rng = RngKey{seed, static_cast<uint32_t>(index), static_cast<uint64_t>(step), 0};
    const SampledToken t = sampler.sample(logits.data(), o.vocab, ctx);
    if (!cfg.ignore_eos && t.token == o.eos) {
      out.reason = FinishReason::kStop;
      return out;
    }
    tokens.push_back(t.token);
    out.ids.push_back(t.token);
    out.logprobs.push_back(t.logprob);
    if (static_cast<int32_t>(out.ids.size()) >= cfg.min_new_tokens) {
      for (const auto& w : cfg.stop_words_list) {
        if (out.ids.size() >= w.size() &&
            std::equal(w.begin(), w.end(), out.ids.end() - static_cast<ptrdiff_t>(w.size()))) {
          out.reason = FinishReason::kStop;
          return out;
        }
      }
    }
    if (static_cast<int32_t>(out.ids.size()) >= max_new ||
        static_cast<int32_t>(tokens.size()) >= o.max_seq_len) {
      out.reason = FinishReason::kLength;
      return out;
    }
  }
}

// A fake model whose "device" samples kDevice rows with the host rules: the engine
// must then produce exactly the host path's outputs.
class DeviceSamplingModel : public FakeModel {
 public:
  using FakeModel::FakeModel;
  bool samples_on_device() const override { return true; }
  // Counts the steps queued with deferred tokens (then LanguageModel's default: the step
  // runs at once, its deferred tokens read from the previous step's ids).
  void launch(const ForwardBatch& b) override {
    if (!b.deferred.empty()) {
      ++deferred_steps_;
      deferred_tokens_ += static_cast<int64_t>(b.deferred.size());
    }
    FakeModel::launch(b);
  }
  int64_t deferred_steps() const { return deferred_steps_; }
  int64_t deferred_tokens() const { return deferred_tokens_; }
  ForwardOutput forward_sample(const ForwardBatch& b) override {
    Tensor all = forward(b);
    const int32_t V = vocab_size();
    const size_t R = b.logits_rows.size();
    ForwardOutput out;
    EXPECT_TRUE(b.sampling.empty() || b.sampling.rows.size() == R);
    int64_t host_rows = 0;
    for (size_t r = 0; r < R; ++r) {
      const bool dev = !b.sampling.empty() && b.sampling.rows[r].mode == RowSampling::Mode::kDevice;
      if (!dev) {
        out.tokens.push_back(kTokenOnHost);
        ++host_rows;
        continue;
      }
      ++device_rows_;
      const RowSampling& p = b.sampling.rows[r];
      std::vector<float> x(all.data<float>() + r * V, all.data<float>() + (r + 1) * V);
      if (!b.sampling.adjust_start.empty()) {
        const auto* a = b.sampling.adjustments.data();
        apply_token_adjustments(
            x.data(), V, p,
            std::span<const TokenAdjustment>(a + b.sampling.adjust_start[r],
                                             a + b.sampling.adjust_start[r + 1]));
      }
      if (!b.sampling.mask_of.empty() && b.sampling.mask_of[r] >= 0) {
        const size_t words = static_cast<size_t>(token_mask_words(V));
        apply_token_mask(
            x.data(), V,
            std::span<const uint32_t>(
                b.sampling.token_masks.data() + static_cast<size_t>(b.sampling.mask_of[r]) * words,
                words));
        ++masked_rows_;
      }
      GenerateConfig c;
      c.temperature = p.greedy ? 0.f : p.temperature;
      c.top_k = p.top_k;
      c.top_p = p.top_p;
      c.min_p = p.min_p;
      out.logprobs.resize(R, 0.0f);
      try {
        const int32_t t = sampler_.choose(x.data(), V, c, RngKey{p.seed, p.seq_index, p.step, 0});
        out.tokens.push_back(t);
        out.logprobs[r] = chosen_logprob(x.data(), V, t, p.greedy ? 1.0f : 1.0f / p.temperature);
      } catch (const Error&) {
        out.tokens.push_back(kTokenNoneAllowed);
      }
    }
    out.logits = Tensor::empty({host_rows, V}, DType::kF32);
    int64_t h = 0;
    for (size_t r = 0; r < R; ++r)
      if (out.tokens[r] == kTokenOnHost)
        std::memcpy(out.logits.data<float>() + (h++) * V, all.data<float>() + r * V,
                    sizeof(float) * static_cast<size_t>(V));
    return out;
  }
  int64_t device_rows() const { return device_rows_; }
  int64_t masked_rows() const { return masked_rows_; }

 private:
  Sampler sampler_;
  int64_t device_rows_ = 0;
  int64_t masked_rows_ = 0;
  int64_t deferred_steps_ = 0;
  int64_t deferred_tokens_ = 0;
};

// Beam search over reference log-probabilities (processed as the engine does).
inline std::vector<BeamSearch::Hypothesis> reference_beams(const std::vector<int32_t>& prompt,
                                                           const GenerateConfig& cfg,
                                                           const FakeModelOptions& o,
                                                           int32_t max_new) {
  BeamSearch bs(cfg.num_beams, cfg.length_penalty, max_new,
                cfg.ignore_eos ? std::vector<int32_t>{} : std::vector<int32_t>{o.eos});
  const std::vector<int32_t> eos = {o.eos};
  std::vector<std::vector<int32_t>> beams = {{}};
  while (true) {
    std::vector<std::vector<float>> rows;
    for (const auto& b : beams) {
      std::vector<int32_t> hist = prompt;
      hist.insert(hist.end(), b.begin(), b.end());
      std::vector<float> l(static_cast<size_t>(o.vocab));
      FakeModel::reference_logits(hist, o, l.data());
      const double lse = log_sum_exp(l.data(), o.vocab);
      for (float& x : l) x = static_cast<float>(x - lse);
      SamplingContext ctx;
      ctx.config = &cfg;
      ctx.tokens = hist;
      ctx.prompt_len = static_cast<int32_t>(prompt.size());
      ctx.eos_ids = eos;
      process_logits(l.data(), o.vocab, ctx);
      rows.push_back(std::move(l));
    }
    std::vector<const float*> ptrs;
    for (const auto& r : rows) ptrs.push_back(r.data());
    const auto next = bs.step(ptrs, o.vocab, beams);
    if (bs.done()) break;
    std::vector<std::vector<int32_t>> fresh;
    for (const auto& c : next) {
      auto t = beams[static_cast<size_t>(c.parent)];
      t.push_back(c.token);
      fresh.push_back(std::move(t));
    }
    beams = std::move(fresh);
  }
  return bs.results();
}

}  // namespace tachyon::testing
