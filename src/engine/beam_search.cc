#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tachyon {

BeamSearch::BeamSearch(int32_t num_beams, float length_penalty, int32_t max_new_tokens,
                       std::vector<int32_t> eos_ids)
    : num_beams_(num_beams),
      length_penalty_(length_penalty),
      max_new_tokens_(max_new_tokens),
      eos_ids_(std::move(eos_ids)) {
  TACHYON_CHECK_GE(num_beams, 1);
  TACHYON_CHECK_GE(max_new_tokens, 1);
}

void BeamSearch::add_finished(Hypothesis h) {
  auto pos = std::upper_bound(finished_.begin(), finished_.end(), h.score,
                              [](double s, const Hypothesis& x) { return s > x.score; });
  finished_.insert(pos, std::move(h));
  if (static_cast<int32_t>(finished_.size()) > num_beams_) finished_.pop_back();
}

std::vector<BeamSearch::Candidate> BeamSearch::step(
    const std::vector<const float*>& log_probs, int32_t vocab,
    const std::vector<std::vector<int32_t>>& beam_tokens) {
  TACHYON_CHECK(!done_, "beam search already finished");
  const size_t num_running = log_probs.size();
  TACHYON_CHECK_EQ(num_running, running_scores_.size());
  TACHYON_CHECK_EQ(num_running, beam_tokens.size());
  const int32_t generated = static_cast<int32_t>(beam_tokens[0].size());

  // The best `keep` continuations over all running beams: ties by beam, then token id.
  const size_t keep = static_cast<size_t>(
      std::max<int32_t>(2, 1 + static_cast<int32_t>(eos_ids_.size())) * num_beams_);
  std::vector<Candidate> cands;
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  for (size_t b = 0; b < num_running; ++b) {
    const float* lp = log_probs[b];
    for (int32_t v = 0; v < vocab; ++v) idx[static_cast<size_t>(v)] = v;
    const size_t k = std::min(keep, idx.size());
    auto better = [&](int32_t x, int32_t y) { return lp[x] > lp[y] || (lp[x] == lp[y] && x < y); };
    std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(), better);
    for (size_t i = 0; i < k; ++i) {
      const int32_t v = idx[i];
      if (std::isinf(lp[v]) && lp[v] < 0) break;  // banned
      cands.push_back({static_cast<int32_t>(b), v, running_scores_[b] + lp[v]});
    }
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  if (cands.size() > keep) cands.resize(keep);

  const bool at_limit = generated + 1 >= max_new_tokens_;
  const double norm = std::pow(static_cast<double>(generated + 1), length_penalty_);
  std::vector<Candidate> next;
  bool all_end = true;
  for (size_t rank = 0; rank < cands.size(); ++rank) {
    const Candidate& c = cands[rank];
    const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), c.token) != eos_ids_.end();
    const bool ends = is_eos || at_limit;
    all_end = all_end && ends;
    if (!ends) {
      if (static_cast<int32_t>(next.size()) < num_beams_) next.push_back(c);
      continue;
    }
    // Only the first num_beams ranks may finish; the rest only back up the running set.
    if (static_cast<int32_t>(rank) >= num_beams_ || !improvement_possible_) continue;
    Hypothesis h;
    h.tokens = beam_tokens[static_cast<size_t>(c.parent)];
    if (!is_eos) h.tokens.push_back(c.token);
    h.sum_logprobs = c.score;
    h.score = c.score / norm;
    h.ended_with_eos = is_eos;
    if (static_cast<int32_t>(finished_.size()) < num_beams_ || h.score > finished_.back().score)
      add_finished(std::move(h));
  }

  running_scores_.clear();
  for (const auto& c : next) running_scores_.push_back(c.score);
  // Can the best running beam still beat the worst finished one?
  if (!next.empty() && static_cast<int32_t>(finished_.size()) >= num_beams_) {
    const double best_possible = next[0].score / norm;
    if (!(best_possible > finished_.back().score)) improvement_possible_ = false;
  }
  if (!improvement_possible_ || all_end || next.empty()) {
    done_ = true;
    next.clear();
    running_scores_.clear();
  }
  return next;
}

}  // namespace tachyon
