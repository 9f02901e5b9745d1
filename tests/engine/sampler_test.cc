#include "engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "engine/rng.h"

namespace tachyon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Logits whose softmax is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -INFINITY);
  return l;
}

std::vector<double> softmax(const std::vector<float>& l, double t = 1.0) {
  double m = -INFINITY;
  for (float x : l) m = std::max(m, static_cast<double>(x));
  std::vector<double> p;
  double z = 0;
  for (float x : l) z += std::exp((x - m) / t);
  for (float x : l) p.push_back(std::exp((x - m) / t) / z);
  return p;
}

std::vector<int64_t> draw(const std::vector<float>& logits, const GenerateConfig& cfg, int n,
                          uint64_t seed = 42) {
  Sampler s;
  std::vector<int64_t> counts(logits.size(), 0);
  std::vector<float> scratch;
  for (int i = 0; i < n; ++i) {
    scratch = logits;
    ++counts[static_cast<size_t>(s.choose(scratch.data(), static_cast<int32_t>(scratch.size()), cfg,
                                          RngKey{seed, 0, static_cast<uint64_t>(i), 0}))];
  }
  return counts;
}

// Pearson's chi-square of counts against probabilities; a cell with probability 0 must
// be empty (a violation returns infinity).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t n = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    if (e == 0) {
      if (counts[i] != 0) return INFINITY;
      continue;
    }
    chi += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return chi;
}

std::vector<double> renormalized(std::vector<double> p, const std::vector<int>& keep) {
  std::vector<double> out(p.size(), 0.0);
  double z = 0;
  for (int k : keep) z += p[static_cast<size_t>(k)];
  for (int k : keep) out[static_cast<size_t>(k)] = p[static_cast<size_t>(k)] / z;
  return out;
}

// With at most 9 degrees of freedom, chi-square above 50 has probability < 1e-7 under
// the right distribution; every mistake tested below lands in the hundreds or more.
constexpr double kChiLimit = 50;
constexpr int kDraws = 40000;

const std::vector<double> kProbs = {0.4, 0.25, 0.15, 0.1, 0.05, 0.05};

TEST(Philox, KnownAnswers) {
  EXPECT_THAT(philox4x32_10({0, 0, 0, 0}, {0, 0}),
              ElementsAre(0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u));
  EXPECT_THAT(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                            {0xffffffffu, 0xffffffffu}),
              ElementsAre(0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu));
  EXPECT_THAT(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                            {0xa4093822u, 0x299f31d0u}),
              ElementsAre(0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u));
}

TEST(Philox, UniformAndKeyed) {
  std::vector<int64_t> bins(20, 0);
  for (uint64_t i = 0; i < 100000; ++i) {
    const double u = rng_uniform({7, 3, i, 0});
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++bins[static_cast<size_t>(u * 20)];
  }
  EXPECT_LT(chi_square(bins, std::vector<double>(20, 0.05)), 60);
  EXPECT_EQ(rng_uniform({1, 2, 3, 0}), rng_uniform({1, 2, 3, 0}));
  EXPECT_NE(rng_uniform({1, 2, 3, 0}), rng_uniform({1, 3, 3, 0}));
  EXPECT_NE(rng_uniform({1, 2, 3, 0}), rng_uniform({2, 2, 3, 0}));
  EXPECT_NE(rng_uniform({1, 2, 3, 0}), rng_uniform({1, 2, 4, 0}));
  EXPECT_NE(rng_uniform({1ull << 40, 2, 3, 0}), rng_uniform({0, 2, 3, 0}));
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  GenerateConfig cfg;
  const auto l = logits_of(kProbs);
  const auto c = draw(l, cfg, kDraws);
  EXPECT_LT(chi_square(c, kProbs), kChiLimit);
}

TEST(Sampler, TemperatureScalesLogits) {
  // A distribution spread widely enough that temperatures tell apart.
  const std::vector<float> l = {2.0f, 1.5f, 1.0f, 0.0f, -1.0f, -2.0f, -3.0f};
  for (float t : {0.5f, 0.8f, 1.7f}) {
    GenerateConfig cfg;
    cfg.temperature = t;
    const auto c = draw(l, cfg, kDraws);
    EXPECT_LT(chi_square(c, softmax(l, t)), kChiLimit) << "temperature " << t;
    // The test has the power to see a wrong temperature.
    EXPECT_GT(chi_square(c, softmax(l, t * 1.25)), 4 * kChiLimit) << "temperature " << t;
  }
}

TEST(Sampler, TopPKeepsTheSmallestPrefixHoldingTheMass) {
  GenerateConfig cfg;
  cfg.top_p = 0.7f;  // 0.4 + 0.25 < 0.7 <= 0.4 + 0.25 + 0.15
  const auto c = draw(logits_of(kProbs), cfg, kDraws);
  EXPECT_LT(chi_square(c, renormalized(kProbs, {0, 1, 2})), kChiLimit);
  cfg.top_p = 0.3f;  // the top token alone
  EXPECT_THAT(draw(logits_of(kProbs), cfg, 200), ElementsAre(200, 0, 0, 0, 0, 0));
  cfg.top_p = 1.0f;  // boundary: everything, the rarest included
  const auto all = draw(logits_of(kProbs), cfg, kDraws);
  EXPECT_LT(chi_square(all, kProbs), kChiLimit);
}

TEST(Sampler, TopPOverALargeVocabularyMatchesAFullSort) {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> l(2000);
  for (float& x : l) x = nd(gen);
  GenerateConfig cfg;
  cfg.top_p = 0.9f;
  // Brute force: sort everything.
  const auto p = softmax(l);
  std::vector<int> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  std::vector<int> keep;
  double cum = 0;
  for (int i : order) {
    keep.push_back(i);
    cum += p[static_cast<size_t>(i)];
    if (cum >= 0.9) break;
  }
  ASSERT_GT(keep.size(), 64u);  // a long head, sorted in full
  const auto c = draw(l, cfg, kDraws / 2);
  const auto expect = renormalized(p, keep);
  // Cells are small: compare on 10 bins by rank, and check the support exactly.
  std::vector<int64_t> bc(10, 0);
  std::vector<double> bp(10, 0);
  for (size_t r = 0; r < keep.size(); ++r) {
    const size_t b = r * 10 / keep.size();
    bc[b] += c[static_cast<size_t>(keep[r])];
    bp[b] += expect[static_cast<size_t>(keep[r])];
  }
  int64_t outside = 0;
  for (size_t t = 0; t < l.size(); ++t)
    if (expect[t] == 0) outside += c[t];
  EXPECT_EQ(outside, 0);
  EXPECT_LT(chi_square(bc, bp), kChiLimit);
}

TEST(Sampler, TopKAndItsBoundaries) {
  GenerateConfig cfg;
  cfg.top_k = 2;
  EXPECT_LT(chi_square(draw(logits_of(kProbs), cfg, kDraws), renormalized(kProbs, {0, 1})),
            kChiLimit);
  cfg.top_k = 6;  // the whole vocabulary: same as off
  EXPECT_LT(chi_square(draw(logits_of(kProbs), cfg, kDraws), kProbs), kChiLimit);
  cfg.top_k = 1;  // greedy
  EXPECT_TRUE(cfg.is_greedy());
  EXPECT_THAT(draw(logits_of(kProbs), cfg, 50), ElementsAre(50, 0, 0, 0, 0, 0));
}

TEST(Sampler, TopPAppliesToTheTopKSet) {
  // As transformers: top_p measures mass within the renormalised top-k set. Among the
  // top 3, token 0 holds 0.4 / 0.8 = 0.5 >= 0.45, so it alone remains (over the whole
  // distribution 0.4 < 0.45 would keep two).
  GenerateConfig cfg;
  cfg.top_k = 3;
  cfg.top_p = 0.45f;
  EXPECT_THAT(draw(logits_of(kProbs), cfg, 300), ElementsAre(300, 0, 0, 0, 0, 0));
}

TEST(Sampler, MinP) {
  GenerateConfig cfg;
  cfg.min_p = 0.3f;  // keeps p >= 0.12: tokens 0, 1, 2
  EXPECT_LT(chi_square(draw(logits_of(kProbs), cfg, kDraws), renormalized(kProbs, {0, 1, 2})),
            kChiLimit);
  cfg.min_p = 1.0f;  // boundary: the top token only
  EXPECT_THAT(draw(logits_of(kProbs), cfg, 100), ElementsAre(100, 0, 0, 0, 0, 0));
  cfg.min_p = 0.0f;
  EXPECT_LT(chi_square(draw(logits_of(kProbs), cfg, kDraws), kProbs), kChiLimit);
  // With a temperature, min_p is relative to the tempered distribution.
  cfg.min_p = 0.45f;
  cfg.temperature = 2.0f;  // p_i / p_max = sqrt(ratio): 0.25/0.4 -> 0.79, 0.15/0.4 -> 0.61,
                           // 0.1/0.4 -> 0.5 (kept), 0.05/0.4 -> 0.35 (dropped)
  const auto l = logits_of(kProbs);
  EXPECT_LT(chi_square(draw(l, cfg, kDraws), renormalized(softmax(l, 2.0), {0, 1, 2, 3})),
            kChiLimit);
}

TEST(Sampler, GreedyBreaksTiesByLowestId) {
  GenerateConfig cfg;
  cfg.temperature = 0.0f;
  std::vector<float> l = {1.0f, 3.0f, 3.0f, -2.0f};
  Sampler s;
  EXPECT_EQ(s.choose(l.data(), 4, cfg, {}), 1);
  EXPECT_EQ(argmax(l.data(), 4), 1);
}

TEST(Sampler, SameKeySameTokenAndBadRowsRefused) {
  GenerateConfig cfg;
  const auto l = logits_of(kProbs);
  Sampler s;
  for (uint64_t step = 0; step < 50; ++step) {
    auto a = l, b = l;
    EXPECT_EQ(s.choose(a.data(), 6, cfg, {9, 1, step, 0}),
              s.choose(b.data(), 6, cfg, {9, 1, step, 0}));
  }
  std::vector<float> nan = {0.0f, NAN, 1.0f};
  EXPECT_THROW(s.choose(nan.data(), 3, cfg, {}), InvalidArgument);
  std::vector<float> none = {-INFINITY, -INFINITY};
  try {
    s.choose(none.data(), 2, cfg, {});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("no token is allowed"));
  }
}

SamplingContext context(const GenerateConfig& cfg, const std::vector<int32_t>& tokens,
                        int32_t prompt_len, const std::vector<int32_t>& eos) {
  SamplingContext ctx;
  ctx.config = &cfg;
  ctx.tokens = tokens;
  ctx.prompt_len = prompt_len;
  ctx.eos_ids = eos;
  return ctx;
}

TEST(LogitsProcessors, RepetitionPenaltyAsTransformers) {
  GenerateConfig cfg;
  cfg.repetition_penalty = 2.0f;
  std::vector<float> l = {2.0f, -2.0f, 4.0f, 1.0f};
  const std::vector<int32_t> tokens = {0, 1, 0, 1};  // prompt {0, 1}, output {0, 1}
  process_logits(l.data(), 4, context(cfg, tokens, 2, {}));
  // Each seen token once: positive divided, negative multiplied.
  EXPECT_THAT(l, ElementsAre(1.0f, -4.0f, 4.0f, 1.0f));
  cfg.repetition_penalty = 1.0f;  // boundary: a no-op
  std::vector<float> m = {2.0f, -2.0f, 4.0f, 1.0f};
  EXPECT_TRUE(processors_inactive(context(cfg, tokens, 2, {})));
  process_logits(m.data(), 4, context(cfg, tokens, 2, {}));
  EXPECT_THAT(m, ElementsAre(2.0f, -2.0f, 4.0f, 1.0f));
}

TEST(LogitsProcessors, PresenceAndFrequencyCountOutputOnly) {
  GenerateConfig cfg;
  cfg.presence_penalty = 0.5f;
  cfg.frequency_penalty = 0.25f;
  std::vector<float> l(4, 0.0f);
  const std::vector<int32_t> tokens = {3, 3, 1, 1, 1, 2};  // prompt {3, 3}
  process_logits(l.data(), 4, context(cfg, tokens, 2, {}));
  EXPECT_THAT(l, ElementsAre(0.0f, -(0.5f + 0.75f), -(0.5f + 0.25f), 0.0f));
  cfg.presence_penalty = -1.0f;  // negative values encourage
  cfg.frequency_penalty = 0.0f;
  std::vector<float> m(4, 0.0f);
  process_logits(m.data(), 4, context(cfg, tokens, 2, {}));
  EXPECT_THAT(m, ElementsAre(0.0f, 1.0f, 1.0f, 0.0f));
}

TEST(LogitsProcessors, BiasAndBans) {
  GenerateConfig cfg;
  cfg.logit_bias = {{0, 5.0f}, {3, -1.5f}};
  cfg.bad_words_list = {{2}, {1, 3}, {0, 0, 1}};
  std::vector<float> l(4, 1.0f);
  const std::vector<int32_t> tokens = {0, 1};
  process_logits(l.data(), 4, context(cfg, tokens, 1, {}));
  // {2} always; {1, 3}: the output ends with 1, so 3 is banned; {0, 0, 1}: no match.
  EXPECT_THAT(l, ElementsAre(6.0f, 1.0f, -INFINITY, -INFINITY));
}

TEST(LogitsProcessors, NoRepeatNgram) {
  GenerateConfig cfg;
  cfg.no_repeat_ngram_size = 2;
  std::vector<float> l(6, 0.0f);
  // Bigrams seen: (1,2) (2,3) (3,1) (1,4); the last token is 1, so 2 and 4 are banned.
  const std::vector<int32_t> tokens = {1, 2, 3, 1, 4, 0, 1};
  process_logits(l.data(), 6, context(cfg, tokens, 3, {}));
  EXPECT_THAT(l, ElementsAre(0.0f, 0.0f, -INFINITY, 0.0f, -INFINITY, 0.0f));
  cfg.no_repeat_ngram_size = 3;
  std::vector<float> m(6, 0.0f);
  const std::vector<int32_t> t3 = {5, 1, 2, 5, 1};  // (5,1,2) seen; ends with (5,1)
  process_logits(m.data(), 6, context(cfg, t3, 1, {}));
  EXPECT_THAT(m, ElementsAre(0.0f, 0.0f, -INFINITY, 0.0f, 0.0f, 0.0f));
  cfg.no_repeat_ngram_size = 1;  // every seen token
  std::vector<float> k(6, 0.0f);
  process_logits(k.data(), 6, context(cfg, t3, 1, {}));
  EXPECT_THAT(k, ElementsAre(0.0f, -INFINITY, -INFINITY, 0.0f, 0.0f, -INFINITY));
  cfg.no_repeat_ngram_size = 7;  // longer than the sequence: nothing
  std::vector<float> z(6, 0.0f);
  process_logits(z.data(), 6, context(cfg, t3, 1, {}));
  EXPECT_THAT(z, ElementsAre(0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f));
}

TEST(LogitsProcessors, MinNewTokensBansEos) {
  GenerateConfig cfg;
  cfg.min_new_tokens = 2;
  const std::vector<int32_t> eos = {3};
  std::vector<float> l(4, 0.0f);
  const std::vector<int32_t> one = {0, 0, 1};  // prompt 2, one generated
  process_logits(l.data(), 4, context(cfg, one, 2, eos));
  EXPECT_EQ(l[3], -INFINITY);
  std::vector<float> m(4, 0.0f);
  const std::vector<int32_t> two = {0, 0, 1, 2};
  EXPECT_TRUE(processors_inactive(context(cfg, two, 2, eos)));
  process_logits(m.data(), 4, context(cfg, two, 2, eos));
  EXPECT_EQ(m[3], 0.0f);
}

TEST(Sampler, LogprobsAreOfTheRawDistribution) {
  GenerateConfig cfg;
  cfg.temperature = 0.0f;
  cfg.return_logprobs = true;
  cfg.top_logprobs = 3;
  cfg.logit_bias = {{2, 10.0f}};  // picks 2, but logprobs stay the model's
  const auto l = logits_of(kProbs);
  const std::vector<int32_t> tokens = {0};
  Sampler s;
  const auto t = s.sample(l.data(), 6, context(cfg, tokens, 1, {}));
  EXPECT_EQ(t.token, 2);
  EXPECT_NEAR(t.logprob, std::log(0.15), 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].token, 0);
  EXPECT_NEAR(t.top[0].logprob, std::log(0.4), 1e-6);
  EXPECT_EQ(t.top[1].token, 1);
  EXPECT_EQ(t.top[2].token, 2);
  // Ties among alternatives: lowest id first.
  const std::vector<float> tie = {0.0f, 1.0f, 1.0f, 1.0f};
  const auto top = top_logprobs(tie.data(), 4, log_sum_exp(tie.data(), 4), 2);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 2);
}

TEST(Sampler, ProcessorsCombineWithSampling) {
  // Bans and penalties apply before the draw: a banned token never appears.
  GenerateConfig cfg;
  cfg.bad_words_list = {{0}};
  cfg.temperature = 1.0f;
  const auto l = logits_of(kProbs);
  const std::vector<int32_t> tokens = {5};
  Sampler s;
  std::vector<int64_t> counts(6, 0);
  for (uint64_t i = 0; i < 20000; ++i) {
    auto ctx = context(cfg, tokens, 1, {});
    ctx.rng = {11, 0, i, 0};
    ++counts[static_cast<size_t>(s.sample(l.data(), 6, ctx).token)];
  }
  EXPECT_LT(chi_square(counts, renormalized(kProbs, {1, 2, 3, 4, 5})), kChiLimit);
}

TEST(LogitsProcessors, AllowedTokenMaskIsTheLastBan) {
  // 40 tokens: a mask of two words, the second partial. Allowed: 1, 3, 33, 39.
  GenerateConfig cfg;
  cfg.logit_bias = {{3, 2.0f}, {5, 9.0f}};
  std::vector<float> l(40, 1.0f);
  const std::vector<uint32_t> mask = {(1u << 1) | (1u << 3), (1u << 1) | (1u << 7)};
  const std::vector<int32_t> tokens = {0};
  auto ctx = context(cfg, tokens, 1, {});
  ctx.allowed = mask;
  EXPECT_FALSE(processors_inactive(ctx));
  process_logits(l.data(), 40, ctx);
  for (int32_t t = 0; t < 40; ++t) {
    const bool allowed = t == 1 || t == 3 || t == 33 || t == 39;
    EXPECT_EQ(l[static_cast<size_t>(t)], allowed ? (t == 3 ? 3.0f : 1.0f) : -INFINITY) << t;
  }
  // Sampled or greedy, only an allowed token comes out (5 has the largest logit).
  const auto raw = logits_of(kProbs);  // 6 tokens: one word
  const std::vector<uint32_t> two = {(1u << 2) | (1u << 4)};
  Sampler s;
  cfg.logit_bias.clear();
  for (uint64_t i = 0; i < 200; ++i) {
    auto c = context(cfg, tokens, 1, {});
    c.allowed = two;
    c.rng = {3, 0, i, 0};
    const int32_t t = s.sample(raw.data(), 6, c).token;
    EXPECT_TRUE(t == 2 || t == 4) << t;
  }
  GenerateConfig greedy;
  greedy.temperature = 0.0f;
  auto g = context(greedy, tokens, 1, {});
  g.allowed = two;
  EXPECT_EQ(s.sample(raw.data(), 6, g).token, 2);
  // Nothing allowed: refused, as when every token is banned.
  const std::vector<uint32_t> none = {0u};
  g.allowed = none;
  EXPECT_THROW(s.sample(raw.data(), 6, g), InvalidArgument);
  // A mask of the wrong size is refused before any logit changes.
  std::vector<float> m(40, 1.0f);
  auto bad = context(cfg, tokens, 1, {});
  bad.allowed = two;
  EXPECT_THROW(process_logits(m.data(), 40, bad), InvalidArgument);
  EXPECT_EQ(m, std::vector<float>(40, 1.0f));
}

}  // namespace
}  // namespace tachyon
