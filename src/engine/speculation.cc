#include "engine/speculation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tachyon {

void draw_distribution(const float* x, int32_t vocab, const GenerateConfig& cfg,
                       std::vector<float>* p) {
  p->assign(static_cast<size_t>(vocab), 0.0f);
  const int32_t top = argmax(x, vocab);  // rejects NaN and rows with nothing allowed
  if (cfg.is_greedy()) {
    (*p)[static_cast<size_t>(top)] = 1.0f;
    return;
  }
  const float m = x[top];
  const double inv_t = 1.0 / static_cast<double>(cfg.temperature);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<double> w(static_cast<size_t>(vocab), 0.0);
  double z_all = 0.0;
  for (int32_t i = 0; i < vocab; ++i) {
    if (x[i] == kNegInf) continue;
    w[static_cast<size_t>(i)] = std::exp(static_cast<double>(x[i] - m) * inv_t);
    z_all += w[static_cast<size_t>(i)];
  }
  const bool use_top_k = cfg.top_k > 0 && cfg.top_k < vocab;
  const bool use_top_p = cfg.top_p < 1.0f;
  if (use_top_k || use_top_p) {
    // The candidates as Sampler::choose keeps them: the top_k best (lowest ids first on
    // ties), then the smallest most-likely prefix holding top_p of the mass (of the top-k
    // set when top_k is on, else of the whole vocabulary).
    std::vector<int32_t> cands;
    for (int32_t i = 0; i < vocab; ++i)
      if (x[i] != kNegInf) cands.push_back(i);
    auto better = [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    size_t keep = cands.size();
    if (use_top_k) keep = std::min(keep, static_cast<size_t>(cfg.top_k));
    std::partial_sort(cands.begin(), cands.begin() + static_cast<ptrdiff_t>(keep), cands.end(),
                      better);
    cands.resize(keep);
    if (use_top_p) {
      double z = 0.0;
      for (int32_t c : cands) z += w[static_cast<size_t>(c)];
      const double want = static_cast<double>(cfg.top_p) * (use_top_k ? z : z_all);
      double cum = 0.0;
      for (size_t i = 0; i < cands.size(); ++i) {
        cum += w[static_cast<size_t>(cands[i])];
        if (cum >= want) {
          cands.resize(i + 1);
          break;
        }
      }
    }
    std::vector<double> kept(static_cast<size_t>(vocab), 0.0);
    for (int32_t c : cands) kept[static_cast<size_t>(c)] = w[static_cast<size_t>(c)];
    w.swap(kept);
  }
  if (cfg.min_p > 0.0f) {
    // min_p keeps p_i >= min_p * p_max, i.e. logit >= m + T log(min_p).
    const float min_logit = m + cfg.temperature * std::log(cfg.min_p);
    for (int32_t i = 0; i < vocab; ++i)
      if (x[i] < min_logit) w[static_cast<size_t>(i)] = 0.0;
  }
  double total = 0.0;
  for (double v : w) total += v;
  TACHYON_CHECK(total > 0.0, "a draw's distribution with no mass");
  for (int32_t i = 0; i < vocab; ++i)
    (*p)[static_cast<size_t>(i)] = static_cast<float>(w[static_cast<size_t>(i)] / total);
}

int32_t draw_index(std::span<const float> weights, double u) {
  double total = 0.0;
  for (float v : weights) total += std::max(0.0f, v);
  if (total <= 0.0) return -1;
  const double target = u * total;
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0f) continue;
    cum += weights[i];
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;
}

DraftVerdict judge_draft(std::span<const float> p, int32_t draft, std::span<const float> q,
                         double u_accept, double u_residual) {
  TACHYON_CHECK(draft >= 0 && static_cast<size_t>(draft) < p.size(), "draft token {} of {}", draft,
                p.size());
  TACHYON_CHECK(q.empty() || q.size() == p.size(), "draft distribution of {} for {}", q.size(),
                p.size());
  const double px = p[static_cast<size_t>(draft)];
  const double qx = q.empty() ? 1.0 : q[static_cast<size_t>(draft)];
  // Accepted with probability min(1, p(x) / q(x)).
  if (px > 0.0 && (qx <= 0.0 || u_accept * qx < px)) return {true, draft};
  std::vector<float> residual(p.begin(), p.end());
  if (q.empty()) {
    residual[static_cast<size_t>(draft)] = 0.0f;
  } else {
    for (size_t i = 0; i < residual.size(); ++i) residual[i] = std::max(0.0f, p[i] - q[i]);
  }
  int32_t token = draw_index(residual, u_residual);
  // p equal to q (to rounding) leaves no residual: then p itself.
  if (token < 0) token = draw_index(p, u_residual);
  TACHYON_CHECK_GE(token, 0);
  return {false, token};
}

std::vector<SampledToken> verify_drafts(Sampler& sampler, const VerifyInput& in, int32_t vocab) {
  const GenerateConfig& cfg = *in.config;
  TACHYON_CHECK(in.num_drafts >= 0 && static_cast<size_t>(in.num_drafts) < in.tokens.size() &&
                    in.rows.size() == static_cast<size_t>(in.num_drafts) + 1,
                "{} verify rows for {} drafts", in.rows.size(), in.num_drafts);
  TACHYON_CHECK(
      in.draft_probs.empty() ||
          in.draft_probs.size() == static_cast<size_t>(in.num_drafts) * static_cast<size_t>(vocab),
      "draft distributions of {} values for {} drafts", in.draft_probs.size(), in.num_drafts);
  const size_t base = in.tokens.size() - static_cast<size_t>(in.num_drafts);
  std::vector<SampledToken> out;
  std::vector<float> p;
  for (int32_t i = 0; i <= in.num_drafts; ++i) {
    // Position i sees the tokens before it: the accepted drafts among them.
    SamplingContext ctx;
    ctx.config = &cfg;
    ctx.tokens = in.tokens.first(base + static_cast<size_t>(i));
    ctx.prompt_len = in.prompt_len;
    ctx.eos_ids = in.eos_ids;
    ctx.rng = RngKey{
        in.seed, in.seq_index,
        static_cast<uint64_t>(base + static_cast<size_t>(i) - static_cast<size_t>(in.prompt_len)),
        0};
    const float* row = in.rows[static_cast<size_t>(i)];
    const float* processed = sampler.process(row, vocab, ctx);
    int32_t token = -1;
    bool accepted = false;
    if (i == in.num_drafts) {
      token = sampler.choose(processed, vocab, cfg, ctx.rng);  // the bonus: a plain draw
    } else {
      const int32_t draft = in.tokens[base + static_cast<size_t>(i)];
      if (cfg.is_greedy()) {
        token = argmax(processed, vocab);
        accepted = token == draft;
      } else if (draft < 0 || draft >= vocab) {
        token = sampler.choose(processed, vocab, cfg, ctx.rng);
      } else {
        draw_distribution(processed, vocab, cfg, &p);
        const std::span<const float> q =
            in.draft_probs.empty()
                ? std::span<const float>{}
                : in.draft_probs.subspan(static_cast<size_t>(i) * static_cast<size_t>(vocab),
                                         static_cast<size_t>(vocab));
        RngKey ka = ctx.rng;
        ka.purpose = kRngPurposeAccept;
        RngKey kr = ctx.rng;
        kr.purpose = kRngPurposeResidual;
        const DraftVerdict v = judge_draft(p, draft, q, rng_uniform(ka), rng_uniform(kr));
        token = v.token;
        accepted = v.accepted;
      }
    }
    out.push_back(Sampler::describe(row, processed, vocab, token, cfg));
    if (!accepted) break;
  }
  return out;
}

}  // namespace tachyon
