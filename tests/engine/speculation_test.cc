// Speculative decoding's verification on its own: the rejection sampler keeps the
// target's distribution (chi-square over many keyed draws on a small vocabulary, with a
// deterministic proposal and with a proposal distribution of its own), the draw's
// distribution is Sampler::choose's, and greedy verification keeps exactly the drafts
// equal to the argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/speculation.h"

namespace tachyon {
namespace {

// Pearson's chi-square statistic of counts against probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double x2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e == 0.0) {
      EXPECT_EQ(counts[i], 0) << "a draw of probability 0: " << i;
      continue;
    }
    x2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return x2;
}

// The 0.999 quantile of chi-square with 7 degrees of freedom (8 outcomes).
constexpr double kChi2Df7 = 24.32;

std::vector<float> random_dist(std::mt19937& rng, int32_t n, int32_t zeros) {
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  std::vector<float> p(static_cast<size_t>(n));
  for (auto& v : p) v = u(rng);
  for (int32_t i = 0; i < zeros; ++i) p[static_cast<size_t>(rng() % n)] = 0.0f;
  float s = 0;
  for (float v : p) s += v;
  for (auto& v : p) v /= s;
  return p;
}

TEST(Speculation, RejectionSamplingWithADeterministicProposalKeepsTheTarget) {
  std::mt19937 rng(7);
  constexpr int32_t kV = 8;
  constexpr int64_t kN = 200000;
  for (int trial = 0; trial < 4; ++trial) {
    const std::vector<float> p = random_dist(rng, kV, trial);
    const int32_t draft = static_cast<int32_t>(rng() % kV);
    std::vector<int64_t> counts(kV, 0);
    int64_t accepted = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const RngKey key{static_cast<uint64_t>(i) * 31 + static_cast<uint64_t>(trial), 0, 3, 0};
      RngKey ka = key, kr = key;
      ka.purpose = kRngPurposeAccept;
      kr.purpose = kRngPurposeResidual;
      const DraftVerdict v = judge_draft(p, draft, {}, rng_uniform(ka), rng_uniform(kr));
      ++counts[static_cast<size_t>(v.token)];
      accepted += v.accepted;
      if (v.accepted) {
        EXPECT_EQ(v.token, draft);
      } else {
        EXPECT_NE(v.token, draft);
      }
    }
    const std::vector<double> pd(p.begin(), p.end());
    EXPECT_LT(chi_square(counts, pd, kN), kChi2Df7) << "trial " << trial;
    // Accepted with probability p(draft).
    EXPECT_NEAR(static_cast<double>(accepted) / kN, p[static_cast<size_t>(draft)], 0.005);
  }
}

TEST(Speculation, RejectionSamplingWithAProposalDistributionKeepsTheTarget) {
  std::mt19937 rng(11);
  constexpr int32_t kV = 8;
  constexpr int64_t kN = 200000;
  for (int trial = 0; trial < 4; ++trial) {
    const std::vector<float> p = random_dist(rng, kV, trial % 2);
    const std::vector<float> q = random_dist(rng, kV, trial / 2);
    std::vector<int64_t> counts(kV, 0);
    int64_t accepted = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const RngKey key{static_cast<uint64_t>(i) + 1000000ull * static_cast<uint64_t>(trial), 1, 9,
                       kRngPurposeProposal};
      const int32_t draft = draw_index(q, rng_uniform(key));  // the proposer's own draw
      RngKey ka = key, kr = key;
      ka.purpose = kRngPurposeAccept;
      kr.purpose = kRngPurposeResidual;
      const DraftVerdict v = judge_draft(p, draft, q, rng_uniform(ka), rng_uniform(kr));
      ++counts[static_cast<size_t>(v.token)];
      accepted += v.accepted;
    }
    const std::vector<double> pd(p.begin(), p.end());
    EXPECT_LT(chi_square(counts, pd, kN), kChi2Df7) << "trial " << trial;
    // The acceptance rate is sum min(p, q).
    double overlap = 0;
    for (int32_t i = 0; i < kV; ++i) overlap += std::min(p[i], q[i]);
    EXPECT_NEAR(static_cast<double>(accepted) / kN, overlap, 0.005);
  }
}

TEST(Speculation, TheDrawDistributionIsTheSamplersDraw) {
  constexpr int32_t kV = 8;
  constexpr int64_t kN = 100000;
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.9f, -3.0f, 1.4f, 0.0f};
  std::vector<GenerateConfig> configs(5);
  configs[0].temperature = 0.7f;
  configs[1].top_k = 3;
  configs[2].top_p = 0.6f;
  configs[3].min_p = 0.2f;
  configs[4].temperature = 1.3f;
  configs[4].top_k = 5;
  configs[4].top_p = 0.8f;
  Sampler sampler;
  for (size_t c = 0; c < configs.size(); ++c) {
    std::vector<float> p;
    draw_distribution(logits.data(), kV, configs[c], &p);
    std::vector<int64_t> counts(kV, 0);
    for (int64_t i = 0; i < kN; ++i)
      ++counts[static_cast<size_t>(sampler.choose(logits.data(), kV, configs[c],
                                                  RngKey{static_cast<uint64_t>(i), 0, 0, 0}))];
    const std::vector<double> pd(p.begin(), p.end());
    EXPECT_LT(chi_square(counts, pd, kN), kChi2Df7) << "config " << c;
  }
  GenerateConfig g;
  g.temperature = 0.0f;
  std::vector<float> p;
  draw_distribution(logits.data(), kV, g, &p);
  EXPECT_EQ(p[3], 1.0f);
}

TEST(Speculation, GreedyVerificationKeepsTheDraftsEqualToTheArgmax) {
  constexpr int32_t kV = 6;
  GenerateConfig cfg;
  cfg.temperature = 0.0f;
  cfg.return_logprobs = true;
  // Rows whose argmax is 1, 4, 2, 5.
  std::vector<std::vector<float>> rows = {
      {0, 3, 1, 0, 0, 0}, {0, 0, 1, 0, 5, 0}, {1, 0, 2, 0, 0, 0}, {0, 0, 0, 0, 0, 9}};
  std::vector<const float*> ptrs;
  for (const auto& r : rows) ptrs.push_back(r.data());
  const std::vector<int32_t> prompt = {0, 3, 3};
  Sampler sampler;
  auto run = [&](std::vector<int32_t> drafts) {
    std::vector<int32_t> tokens = prompt;
    tokens.insert(tokens.end(), drafts.begin(), drafts.end());
    VerifyInput in;
    in.config = &cfg;
    in.tokens = tokens;
    in.prompt_len = 3;
    in.num_drafts = static_cast<int32_t>(drafts.size());
    in.rows = std::span<const float* const>(ptrs.data(), drafts.size() + 1);
    std::vector<int32_t> out;
    for (const SampledToken& t : verify_drafts(sampler, in, kV)) {
      out.push_back(t.token);
      EXPECT_NEAR(t.logprob,
                  std::log(std::exp(rows[out.size() - 1][t.token]) /
                           [&] {
                             double s = 0;
                             for (float v : rows[out.size() - 1]) s += std::exp(v);
                             return s;
                           }()),
                  1e-5);
    }
    return out;
  };
  EXPECT_EQ(run({1, 4, 2}), (std::vector<int32_t>{1, 4, 2, 5}));  // all accepted, then a bonus
  EXPECT_EQ(run({1, 0, 2}), (std::vector<int32_t>{1, 4}));        // the second rejected
  EXPECT_EQ(run({3, 4, 2}), (std::vector<int32_t>{1}));
  EXPECT_EQ(run({}), (std::vector<int32_t>{1}));
}

}  // namespace
}  // namespace tachyon
