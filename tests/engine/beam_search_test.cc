#include "engine/beam_search.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "engine/fake_model.h"

namespace tachyon {
namespace {

using LogprobFn = std::function<std::vector<float>(const std::vector<int32_t>&)>;

// Log-probabilities that depend on the whole history, from the fake model.
LogprobFn fake_logprobs(int32_t vocab, float scale) {
  return [vocab, scale](const std::vector<int32_t>& hist) {
    testing::FakeModelOptions o;
    o.vocab = vocab;
    o.scale = scale;
    o.eos = -1;
    std::vector<float> l(static_cast<size_t>(vocab));
    std::vector<int32_t> h = {7};  // a fixed prompt
    h.insert(h.end(), hist.begin(), hist.end());
    testing::FakeModel::reference_logits(h, o, l.data());
    double m = *std::max_element(l.begin(), l.end()), z = 0;
    for (float x : l) z += std::exp(x - m);
    for (float& x : l) x = static_cast<float>(x - m - std::log(z));
    return l;
  };
}

struct Result {
  std::vector<int32_t> tokens;
  double score;
  double sum;
};

std::vector<Result> run_engine_beam(const LogprobFn& fn, int32_t vocab, int32_t eos, int32_t nb,
                                    float lp, int32_t max_new) {
  BeamSearch bs(nb, lp, max_new, eos >= 0 ? std::vector<int32_t>{eos} : std::vector<int32_t>{});
  std::vector<std::vector<int32_t>> beams = {{}};
  while (true) {
    std::vector<std::vector<float>> rows;
    std::vector<const float*> ptrs;
    for (const auto& b : beams) rows.push_back(fn(b));
    for (const auto& r : rows) ptrs.push_back(r.data());
    const auto next = bs.step(ptrs, vocab, beams);
    if (bs.done()) break;
    std::vector<std::vector<int32_t>> nb_beams;
    for (const auto& c : next) {
      auto t = beams[static_cast<size_t>(c.parent)];
      t.push_back(c.token);
      nb_beams.push_back(t);
    }
    beams = nb_beams;
  }
  std::vector<Result> out;
  for (const auto& h : bs.results()) out.push_back({h.tokens, h.score, h.sum_logprobs});
  return out;
}

// An independent, plain rendering of the same algorithm: all candidates of all beams
// sorted at once.
std::vector<Result> reference_beam(const LogprobFn& fn, int32_t vocab, int32_t eos, int32_t nb,
                                   float lp, int32_t max_new) {
  struct Beam {
    std::vector<int32_t> toks;
    double score;
  };
  struct Cand {
    double score;
    int32_t beam, token;
  };
  std::vector<Beam> running = {{{}, 0.0}};
  std::vector<Result> finished;
  bool improvement = true;
  for (int32_t g = 0; g < max_new; ++g) {
    std::vector<Cand> cands;
    for (int32_t b = 0; b < static_cast<int32_t>(running.size()); ++b) {
      const auto lps = fn(running[static_cast<size_t>(b)].toks);
      for (int32_t v = 0; v < vocab; ++v)
        if (!std::isinf(lps[static_cast<size_t>(v)]))
          cands.push_back(
              {running[static_cast<size_t>(b)].score + lps[static_cast<size_t>(v)], b, v});
    }
    std::sort(cands.begin(), cands.end(), [&](const Cand& a, const Cand& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.beam != b.beam) return a.beam < b.beam;
      return fn(running[static_cast<size_t>(a.beam)].toks)[static_cast<size_t>(a.token)] >
                 fn(running[static_cast<size_t>(b.beam)].toks)[static_cast<size_t>(b.token)] ||
             a.token < b.token;
    });
    cands.resize(std::min(cands.size(), static_cast<size_t>(2 * nb)));
    std::vector<Beam> next;
    bool all_end = true;
    const double norm = std::pow(g + 1.0, lp);
    for (size_t rank = 0; rank < cands.size(); ++rank) {
      const Cand& c = cands[rank];
      const bool ends = c.token == eos || g + 1 >= max_new;
      all_end = all_end && ends;
      auto toks = running[static_cast<size_t>(c.beam)].toks;
      if (!ends) {
        if (static_cast<int32_t>(next.size()) < nb) {
          toks.push_back(c.token);
          next.push_back({toks, c.score});
        }
        continue;
      }
      if (static_cast<int32_t>(rank) >= nb || !improvement) continue;
      if (c.token != eos) toks.push_back(c.token);
      finished.push_back({toks, c.score / norm, c.score});
      std::stable_sort(finished.begin(), finished.end(),
                       [](const Result& a, const Result& b) { return a.score > b.score; });
      if (static_cast<int32_t>(finished.size()) > nb) finished.pop_back();
    }
    if (!next.empty() && static_cast<int32_t>(finished.size()) >= nb &&
        !(next[0].score / norm > finished.back().score))
      improvement = false;
    if (!improvement || all_end || next.empty()) break;
    running = next;
  }
  return finished;
}

void expect_same(const std::vector<Result>& a, const std::vector<Result>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "hypothesis " << i;
    EXPECT_NEAR(a[i].score, b[i].score, 1e-9);
    EXPECT_NEAR(a[i].sum, b[i].sum, 1e-9);
  }
}

TEST(BeamSearch, MatchesAPlainReference) {
  for (int32_t nb : {2, 3, 5}) {
    for (float lp : {1.0f, 0.0f, 2.0f, -0.5f}) {
      for (float scale : {1.0f, 3.0f}) {
        const auto fn = fake_logprobs(8, scale);
        SCOPED_TRACE(::testing::Message() << "beams " << nb << " lp " << lp << " scale " << scale);
        expect_same(run_engine_beam(fn, 8, /*eos=*/2, nb, lp, 9),
                    reference_beam(fn, 8, 2, nb, lp, 9));
      }
    }
  }
}

TEST(BeamSearch, WideEnoughBeamsAreExhaustive) {
  // 3 ordinary tokens and EOS, at most 3 new tokens: 1 + 3 + 9 sequences end with EOS,
  // 27 run to the limit. 40 beams keep them all, so the results are every sequence,
  // ordered by summed log-probability (length_penalty 0).
  const int32_t vocab = 4, eos = 3;
  const auto fn = fake_logprobs(vocab, 2.0f);
  const auto got = run_engine_beam(fn, vocab, eos, 40, 0.0f, 3);
  std::vector<Result> all;
  std::function<void(std::vector<int32_t>, double)> walk = [&](std::vector<int32_t> t, double s) {
    const auto lps = fn(t);
    for (int32_t v = 0; v < vocab; ++v) {
      const double s2 = s + lps[static_cast<size_t>(v)];
      if (v == eos) {
        all.push_back({t, s2, s2});
      } else if (t.size() + 1 == 3) {
        auto u = t;
        u.push_back(v);
        all.push_back({u, s2, s2});
      } else {
        auto u = t;
        u.push_back(v);
        walk(u, s2);
      }
    }
  };
  walk({}, 0.0);
  ASSERT_EQ(all.size(), 40u);
  std::sort(all.begin(), all.end(),
            [](const Result& a, const Result& b) { return a.score > b.score; });
  expect_same(got, all);
}

TEST(BeamSearch, OneBeamIsGreedy) {
  const auto fn = fake_logprobs(16, 3.0f);
  const int32_t eos = 5;
  const auto got = run_engine_beam(fn, 16, eos, 1, 1.0f, 30);
  std::vector<int32_t> greedy;
  for (int i = 0; i < 30; ++i) {
    const auto lps = fn(greedy);
    const int32_t t = static_cast<int32_t>(std::max_element(lps.begin(), lps.end()) - lps.begin());
    if (t == eos) break;
    greedy.push_back(t);
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tokens, greedy);
}

TEST(BeamSearch, BeatsGreedyOnATrap) {
  // Greedy takes token 0 (0.6) and then faces a flat distribution; beam search finds
  // token 1 (0.4) followed by a near-certain EOS.
  const int32_t eos = 3;
  const LogprobFn fn = [](const std::vector<int32_t>& h) {
    auto lg = [](std::vector<double> p) {
      std::vector<float> out;
      for (double x : p) out.push_back(x > 0 ? static_cast<float>(std::log(x)) : -INFINITY);
      return out;
    };
    if (h.empty()) return lg({0.6, 0.4, 0.0, 0.0});
    if (h == std::vector<int32_t>{0}) return lg({0.3, 0.3, 0.2, 0.2});
    if (h == std::vector<int32_t>{1}) return lg({0.05, 0.0, 0.0, 0.95});
    return lg({0.0, 0.0, 0.0, 1.0});
  };
  const auto got = run_engine_beam(fn, 4, eos, 2, 1.0f, 5);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].tokens, std::vector<int32_t>{1});
  EXPECT_NEAR(got[0].sum, std::log(0.4) + std::log(0.95), 1e-6);
  EXPECT_NEAR(got[0].score, (std::log(0.4) + std::log(0.95)) / 2.0, 1e-6);  // EOS counts
}

}  // namespace
}  // namespace tachyon
