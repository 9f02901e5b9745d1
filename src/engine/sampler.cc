#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tachyon {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool ends_with(std::span<const int32_t> tokens, std::span<const int32_t> suffix) {
  if (suffix.size() > tokens.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), tokens.end() - suffix.size());
}

void ban(float* logits, int32_t vocab, int32_t token) {
  if (token >= 0 && token < vocab) logits[token] = kNegInf;
}

}  // namespace

bool processors_inactive(const SamplingContext& ctx) {
  const GenerateConfig& c = *ctx.config;
  const int32_t generated = static_cast<int32_t>(ctx.tokens.size()) - ctx.prompt_len;
  return c.repetition_penalty == 1.0f && c.presence_penalty == 0.0f &&
         c.frequency_penalty == 0.0f && c.logit_bias.empty() && c.no_repeat_ngram_size == 0 &&
         c.bad_words_list.empty() && (generated >= c.min_new_tokens || ctx.eos_ids.empty());
}

void process_logits(float* logits, int32_t vocab, const SamplingContext& ctx) {
  const GenerateConfig& c = *ctx.config;
  const std::span<const int32_t> all = ctx.tokens;
  const std::span<const int32_t> generated = all.subspan(static_cast<size_t>(ctx.prompt_len));

  if (c.repetition_penalty != 1.0f) {
    std::vector<int32_t> uniq(all.begin(), all.end());
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (int32_t t : uniq) {
      if (t < 0 || t >= vocab) continue;
      float& x = logits[t];
      x = x < 0.0f ? x * c.repetition_penalty : x / c.repetition_penalty;
    }
  }
  if (c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f) {
    std::vector<int32_t> sorted(generated.begin(), generated.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      const int32_t t = sorted[i];
      if (t >= 0 && t < vocab)
        logits[t] -= c.presence_penalty + c.frequency_penalty * static_cast<float>(j - i);
      i = j;
    }
  }
  for (const auto& [t, b] : c.logit_bias)
    if (t < vocab) logits[t] += b;

  if (c.no_repeat_ngram_size > 0) {
    const size_t n = static_cast<size_t>(c.no_repeat_ngram_size);
    const size_t len = all.size();
    if (len + 1 >= n) {
      // Tokens that would complete an n-gram already present.
      const auto prefix = all.subspan(len - (n - 1));
      for (size_t i = 0; i + n <= len; ++i)
        if (std::equal(prefix.begin(), prefix.end(), all.begin() + static_cast<ptrdiff_t>(i)))
          ban(logits, vocab, all[i + n - 1]);
    }
  }
  for (const auto& word : c.bad_words_list) {
    const std::span<const int32_t> w(word);
    if (ends_with(all, w.first(w.size() - 1))) ban(logits, vocab, w.back());
  }
  if (static_cast<int32_t>(generated.size()) < c.min_new_tokens)
    for (int32_t e : ctx.eos_ids) ban(logits, vocab, e);
}

int32_t argmax(const float* x, int32_t n) {
  int32_t best = -1;
  float best_v = kNegInf;
  bool nan = false;
  for (int32_t i = 0; i < n; ++i) {
    const float v = x[i];
    nan |= v != v;
    if (v > best_v) {
      best_v = v;
      best = i;
    }
  }
  if (nan) raise<InvalidArgument>("the model produced NaN logits");
  if (best < 0) raise<InvalidArgument>("no token is allowed: every logit is -inf");
  return best;
}

double log_sum_exp(const float* x, int32_t n) {
  float m = kNegInf;
  for (int32_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  if (m == kNegInf) return m;
  double s = 0.0;
  for (int32_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

std::vector<TokenLogprob> top_logprobs(const float* x, int32_t n, double lse, int32_t k) {
  k = std::min(k, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  auto better = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  std::vector<TokenLogprob> out;
  out.reserve(static_cast<size_t>(k));
  for (int32_t i = 0; i < k; ++i) {
    const int32_t t = idx[static_cast<size_t>(i)];
    out.push_back({t, static_cast<float>(x[t] - lse)});
  }
  return out;
}

int32_t Sampler::choose(float* logits, int32_t vocab, const GenerateConfig& cfg,
                        const RngKey& key) {
  if (cfg.is_greedy()) return argmax(logits, vocab);
  const int32_t top = argmax(logits, vocab);  // also rejects NaN and all -inf
  const float m = logits[top];
  const double inv_t = 1.0 / static_cast<double>(cfg.temperature);
  // min_p keeps p_i >= min_p * p_max, i.e. (l_i - m) / T >= log(min_p).
  const double min_rel = cfg.min_p > 0.0f ? std::log(static_cast<double>(cfg.min_p)) : -HUGE_VAL;
  auto weight = [&](float l) {
    const double z = (static_cast<double>(l) - m) * inv_t;
    return z >= min_rel ? std::exp(z) : 0.0;
  };
  const double u = rng_uniform(key);

  const bool use_top_k = cfg.top_k > 0 && cfg.top_k < vocab;
  if (!use_top_k && cfg.top_p >= 1.0f) {
    // The whole vocabulary, in index order.
    scratch_.resize(static_cast<size_t>(vocab));
    double total = 0.0;
    for (int32_t i = 0; i < vocab; ++i) {
      const double w = logits[i] == kNegInf ? 0.0 : weight(logits[i]);
      scratch_[static_cast<size_t>(i)] = static_cast<float>(w);
      total += w;
    }
    const double target = u * total;
    double cum = 0.0;
    int32_t last = top;
    for (int32_t i = 0; i < vocab; ++i) {
      const double w = scratch_[static_cast<size_t>(i)];
      if (w <= 0.0) continue;
      cum += w;
      last = i;
      if (cum > target) return i;
    }
    return last;
  }

  cands_.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (logits[i] != kNegInf) cands_.push_back({logits[i], i, 0.0});
  auto better = [](const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
  };
  if (use_top_k && static_cast<size_t>(cfg.top_k) < cands_.size()) {
    std::nth_element(cands_.begin(), cands_.begin() + cfg.top_k, cands_.end(), better);
    cands_.resize(static_cast<size_t>(cfg.top_k));
  }
  double z = 0.0;
  for (Cand& c : cands_) {
    c.weight = std::exp((static_cast<double>(c.logit) - m) * inv_t);
    z += c.weight;
  }
  if (cfg.top_p < 1.0f) {
    // The smallest most-likely prefix holding top_p of the mass (of the top-k set):
    // select a head of k candidates in linear time, growing k until the head holds
    // enough, then sort the head alone.
    const double want = static_cast<double>(cfg.top_p) * z;
    const size_t n = cands_.size();
    size_t k = std::min<size_t>(n, 64);
    while (true) {
      if (k < n)
        std::nth_element(cands_.begin(), cands_.begin() + static_cast<ptrdiff_t>(k), cands_.end(),
                         better);
      double head = 0.0;
      for (size_t i = 0; i < k; ++i) head += cands_[i].weight;
      if (head >= want || k == n) break;
      k = std::min(n, k * 4);
    }
    std::sort(cands_.begin(), cands_.begin() + static_cast<ptrdiff_t>(k), better);
    double cum = 0.0;
    size_t keep = k;
    for (size_t i = 0; i < k; ++i) {
      cum += cands_[i].weight;
      if (cum >= want) {
        keep = i + 1;
        break;
      }
    }
    cands_.resize(keep);
  }
  // min_p, relative to the top token's probability.
  double total = 0.0;
  for (Cand& c : cands_) {
    if ((static_cast<double>(c.logit) - m) * inv_t < min_rel) c.weight = 0.0;
    total += c.weight;
  }
  const double target = u * total;
  double cum = 0.0;
  int32_t last = top;
  for (const Cand& c : cands_) {
    if (c.weight <= 0.0) continue;
    cum += c.weight;
    last = c.token;
    if (cum > target) return c.token;
  }
  return last;
}

SampledToken Sampler::sample(const float* logits, int32_t vocab, const SamplingContext& ctx) {
  const GenerateConfig& cfg = *ctx.config;
  SampledToken out;
  if (cfg.is_greedy() && processors_inactive(ctx)) {
    out.token = argmax(logits, vocab);
  } else {
    processed_.assign(logits, logits + vocab);
    process_logits(processed_.data(), vocab, ctx);
    out.token = choose(processed_.data(), vocab, cfg, ctx.rng);
  }
  if (cfg.return_logprobs) {
    const double lse = log_sum_exp(logits, vocab);
    out.logprob = static_cast<float>(logits[out.token] - lse);
    if (cfg.top_logprobs > 0) out.top = top_logprobs(logits, vocab, lse, cfg.top_logprobs);
  }
  return out;
}

}  // namespace tachyon
