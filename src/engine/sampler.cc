#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "engine/row_math.h"

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
         c.bad_words_list.empty() && (generated >= c.min_new_tokens || ctx.eos_ids.empty()) &&
         ctx.allowed.empty();
}

void process_logits(float* logits, int32_t vocab, const SamplingContext& ctx) {
  if (!ctx.allowed.empty() && static_cast<int64_t>(ctx.allowed.size()) != token_mask_words(vocab))
    raise<InvalidArgument>("the allowed-token mask has {} words for a vocabulary of {}",
                           ctx.allowed.size(), vocab);
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
  if (!ctx.allowed.empty()) apply_token_mask(logits, vocab, ctx.allowed);
}

int32_t argmax(const float* x, int32_t n) {
  bool bad = false;
  const float m = row_max(x, n, &bad);
  if (bad) raise<InvalidArgument>("the model produced NaN or infinite logits");
  if (m == kNegInf) raise<InvalidArgument>("no token is allowed: every logit is -inf");
  return row_find(x, n, m);
}

double log_sum_exp(const float* x, int32_t n) {
  bool bad = false;
  const float m = row_max(x, n, &bad);
  if (bad) return std::numeric_limits<double>::quiet_NaN();
  if (m == kNegInf) return m;
  return m + std::log(row_exp_sum(x, n, m));
}

float chosen_logprob(const float* processed, int32_t vocab, int32_t token, float inv_t) {
  const float m = processed[argmax(processed, vocab)];
  const double sum = row_exp_sum(processed, vocab, m, inv_t);
  return static_cast<float>(static_cast<double>(processed[token] - m) * inv_t - std::log(sum));
}

float draw_inv_temperature(const GenerateConfig& config) {
  return config.is_greedy() ? 1.0f : 1.0f / config.temperature;
}

std::vector<TokenLogprob> top_logprobs(const float* x, int32_t n, double lse, int32_t k) {
  k = std::min(k, n);
  // One pass keeping the k best so far, best first (lowest id first on ties); once k
  // are held, only values above the k-th are looked at.
  std::vector<TokenLogprob> best;
  best.reserve(static_cast<size_t>(k) + 1);
  for (int32_t i = 0; i < n; ++i) {
    if (static_cast<int32_t>(best.size()) == k) {
      i = row_next_above(x, n, i, best.back().logprob);
      if (i < 0) break;
    }
    size_t pos = best.size();
    while (pos > 0 && x[i] > best[pos - 1].logprob) --pos;
    best.insert(best.begin() + static_cast<ptrdiff_t>(pos), TokenLogprob{i, x[i]});
    if (static_cast<int32_t>(best.size()) > k) best.pop_back();
  }
  for (auto& t : best) t.logprob = static_cast<float>(t.logprob - lse);
  return best;
}

int32_t Sampler::choose(const float* logits, int32_t vocab, const GenerateConfig& cfg,
                        const RngKey& key) {
  const int32_t top = argmax(logits, vocab);  // rejects NaN and rows with nothing allowed
  if (cfg.is_greedy()) return top;
  const float m = logits[top];
  const float t = cfg.temperature;
  const float inv_t = 1.0f / t;
  // min_p keeps p_i >= min_p * p_max, i.e. logit >= m + T log(min_p).
  const float min_logit =
      cfg.min_p > 0.0f ? m + t * std::log(cfg.min_p) : -std::numeric_limits<float>::infinity();
  const double u = rng_uniform(key);

  const bool use_top_k = cfg.top_k > 0 && cfg.top_k < vocab;
  const bool use_top_p = cfg.top_p < 1.0f;
  if (!use_top_k && !use_top_p) {
    // The whole vocabulary, in index order; blocks of 64 find where the draw falls.
    weights_.resize(static_cast<size_t>(vocab));
    double total = row_exp(logits, vocab, m, inv_t, weights_.data());
    if (cfg.min_p > 0.0f) {
      total = 0.0;
      for (int32_t i = 0; i < vocab; ++i) {
        if (logits[i] < min_logit) weights_[static_cast<size_t>(i)] = 0.0f;
        total += weights_[static_cast<size_t>(i)];
      }
    }
    const double target = u * total;
    double cum = 0.0;
    int32_t last = top;
    constexpr int32_t kBlock = 64;
    for (int32_t b = 0; b < vocab; b += kBlock) {
      const int32_t e = std::min(vocab, b + kBlock);
      float block = 0.0f;
      for (int32_t i = b; i < e; ++i) block += weights_[static_cast<size_t>(i)];
      if (cum + block <= target && e < vocab) {
        cum += block;
        continue;
      }
      for (int32_t i = b; i < e; ++i) {
        const float w = weights_[static_cast<size_t>(i)];
        if (w <= 0.0f) continue;
        cum += w;
        last = i;
        if (cum > target) return i;
      }
    }
    return last;
  }

  auto better = [](const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
  };
  double z_all = 0.0;
  if (use_top_k) {
    // The k best in one pass: a heap whose top is the worst kept candidate; once full,
    // only values above it are looked at (ties keep the lower ids).
    cands_.clear();
    const size_t k = static_cast<size_t>(cfg.top_k);
    for (int32_t i = 0; i < vocab; ++i) {
      if (cands_.size() == k) {
        i = row_next_above(logits, vocab, i, cands_.front().logit);
        if (i < 0) break;
        std::pop_heap(cands_.begin(), cands_.end(), better);
        cands_.back() = {logits[i], i, 0.0};
      } else {
        if (logits[i] == kNegInf) continue;
        cands_.push_back({logits[i], i, 0.0});
      }
      std::push_heap(cands_.begin(), cands_.end(), better);
    }
  } else {
    // top_p alone: the tokens within `span` temperatures of the top logit form a head of
    // the sorted order; widen it until it holds top_p of the whole mass.
    weights_.resize(static_cast<size_t>(vocab));
    z_all = row_exp(logits, vocab, m, inv_t, weights_.data());
    for (float span = 4.0f;; span *= 2.0f) {
      const bool all = span > 1024.0f;
      const float floor = all ? kNegInf : m - span * t;
      cands_.clear();
      double head = 0.0;
      for (int32_t i = 0; i < vocab; ++i) {
        if (logits[i] >= floor && logits[i] != kNegInf) {
          cands_.push_back({logits[i], i, 0.0});
          head += weights_[static_cast<size_t>(i)];
        }
      }
      if (all || head >= static_cast<double>(cfg.top_p) * z_all) break;
    }
  }
  double z = 0.0;
  for (Cand& c : cands_) {
    c.weight = fast_exp((c.logit - m) * inv_t);
    z += c.weight;
  }
  if (use_top_p) {
    // The smallest most-likely prefix holding top_p of the mass (of the top-k set when
    // top_k is on, as transformers applies them).
    const double want = static_cast<double>(cfg.top_p) * (use_top_k ? z : z_all);
    std::sort(cands_.begin(), cands_.end(), better);
    double cum = 0.0;
    size_t keep = cands_.size();
    for (size_t i = 0; i < cands_.size(); ++i) {
      cum += cands_[i].weight;
      if (cum >= want) {
        keep = i + 1;
        break;
      }
    }
    cands_.resize(keep);
  } else {
    std::sort(cands_.begin(), cands_.end(), better);  // a fixed order for the draw
  }
  double total = 0.0;
  for (Cand& c : cands_) {
    if (c.logit < min_logit) c.weight = 0.0;
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

const float* Sampler::process(const float* logits, int32_t vocab, const SamplingContext& ctx) {
  if (processors_inactive(ctx)) return logits;
  processed_.assign(logits, logits + vocab);
  process_logits(processed_.data(), vocab, ctx);
  return processed_.data();
}

SampledToken Sampler::describe(const float* logits, const float* processed, int32_t vocab,
                               int32_t token, const GenerateConfig& cfg) {
  SampledToken out;
  out.token = token;
  out.sample_logprob = chosen_logprob(processed, vocab, token, draw_inv_temperature(cfg));
  if (cfg.return_logprobs) {
    const double lse = log_sum_exp(logits, vocab);
    out.logprob = static_cast<float>(logits[token] - lse);
    if (cfg.top_logprobs > 0) out.top = top_logprobs(logits, vocab, lse, cfg.top_logprobs);
  }
  return out;
}

SampledToken Sampler::sample(const float* logits, int32_t vocab, const SamplingContext& ctx) {
  const float* processed = process(logits, vocab, ctx);
  return describe(logits, processed, vocab, choose(processed, vocab, *ctx.config, ctx.rng),
                  *ctx.config);
}

}  // namespace tachyon

namespace tachyon {

void token_adjustments(const SamplingContext& ctx, int32_t vocab,
                       std::vector<TokenAdjustment>* out) {
  const GenerateConfig& c = *ctx.config;
  const std::span<const int32_t> all = ctx.tokens;
  const std::span<const int32_t> generated = all.subspan(static_cast<size_t>(ctx.prompt_len));
  const size_t first = out->size();
  auto add = [&](int32_t t) -> TokenAdjustment& {
    out->push_back(TokenAdjustment{t, 0, 0.0f, 0});
    return out->back();
  };
  if (c.repetition_penalty != 1.0f)
    for (int32_t t : all)
      if (t >= 0 && t < vocab) add(t).flags |= TokenAdjustment::kInContext;
  if (c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f)
    for (int32_t t : generated)
      if (t >= 0 && t < vocab) add(t).count = 1;
  for (const auto& [t, b] : c.logit_bias)
    if (t >= 0 && t < vocab) add(t).bias = b;
  auto ban = [&](int32_t t) {
    if (t >= 0 && t < vocab) add(t).flags |= TokenAdjustment::kBanned;
  };
  if (c.no_repeat_ngram_size > 0) {
    const size_t n = static_cast<size_t>(c.no_repeat_ngram_size);
    const size_t len = all.size();
    if (len + 1 >= n) {
      const auto prefix = all.subspan(len - (n - 1));
      for (size_t i = 0; i + n <= len; ++i)
        if (std::equal(prefix.begin(), prefix.end(), all.begin() + static_cast<ptrdiff_t>(i)))
          ban(all[i + n - 1]);
    }
  }
  for (const auto& word : c.bad_words_list) {
    const std::span<const int32_t> w(word);
    if (ends_with(all, w.first(w.size() - 1))) ban(w.back());
  }
  if (static_cast<int32_t>(generated.size()) < c.min_new_tokens)
    for (int32_t e : ctx.eos_ids) ban(e);
  // Merge the entries of each token: flags OR'd, counts summed, biases summed.
  auto begin = out->begin() + static_cast<ptrdiff_t>(first);
  std::stable_sort(begin, out->end(), [](const TokenAdjustment& a, const TokenAdjustment& b) {
    return a.token < b.token;
  });
  auto w = begin;
  for (auto r = begin; r != out->end();) {
    TokenAdjustment m = *r;
    for (++r; r != out->end() && r->token == m.token; ++r) {
      m.count += r->count;
      m.bias += r->bias;
      m.flags |= r->flags;
    }
    *w++ = m;
  }
  out->erase(w, out->end());
}

void apply_token_adjustments(float* logits, int32_t vocab, const RowSampling& row,
                             std::span<const TokenAdjustment> adjustments) {
  for (const TokenAdjustment& a : adjustments) {
    if (a.token < 0 || a.token >= vocab) continue;
    float x = logits[a.token];
    if ((a.flags & TokenAdjustment::kInContext) != 0 && row.repetition_penalty != 1.0f)
      x = x < 0.0f ? x * row.repetition_penalty : x / row.repetition_penalty;
    if (a.count > 0 && (row.presence_penalty != 0.0f || row.frequency_penalty != 0.0f)) {
      const float freq = row.frequency_penalty * static_cast<float>(a.count);
      const float sub = row.presence_penalty + freq;
      x -= sub;
    }
    if (a.bias != 0.0f) x += a.bias;
    if ((a.flags & TokenAdjustment::kBanned) != 0) x = kNegInf;
    logits[a.token] = x;
  }
}

RowSampling row_sampling(const GenerateConfig& c, const RngKey& key) {
  RowSampling r;
  r.mode = RowSampling::Mode::kDevice;
  r.greedy = c.is_greedy();
  r.temperature = c.temperature;
  r.top_k = c.top_k;
  r.top_p = c.top_p;
  r.min_p = c.min_p;
  r.repetition_penalty = c.repetition_penalty;
  r.presence_penalty = c.presence_penalty;
  r.frequency_penalty = c.frequency_penalty;
  r.seed = key.seed;
  r.seq_index = key.seq_index;
  r.step = key.step;
  return r;
}

}  // namespace tachyon
