#include "cli/bench_report.h"

#include <algorithm>

namespace tachyon::cli {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Json dist(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  if (!v.empty()) mean /= static_cast<double>(v.size());
  return {{"mean", mean},
          {"p10", percentile(v, 10)},
          {"p50", percentile(v, 50)},
          {"p90", percentile(v, 90)},
          {"p99", percentile(v, 99)}};
}

void add_turn_report(const std::vector<std::vector<double>>& ttft_by_turn, Json* report) {
  std::vector<double> later;
  Json by_turn = Json::array();
  for (size_t k = 0; k < ttft_by_turn.size(); ++k) {
    by_turn.push_back(ttft_by_turn[k].empty() ? Json(nullptr)
                                              : Json(percentile(ttft_by_turn[k], 50)));
    if (k > 0) later.insert(later.end(), ttft_by_turn[k].begin(), ttft_by_turn[k].end());
  }
  (*report)["ttft_p50_ms_by_turn"] = std::move(by_turn);
  (*report)["ttft_p50_ms_first_turn"] =
      ttft_by_turn.empty() ? 0.0 : percentile(ttft_by_turn[0], 50);
  (*report)["ttft_p50_ms_later_turns"] = percentile(later, 50);
}

Json speculation_report(const EngineStats& before, const EngineStats& after) {
  const int64_t rounds = after.spec_num_drafts - before.spec_num_drafts;
  const int64_t drafts = after.spec_num_draft_tokens - before.spec_num_draft_tokens;
  const int64_t accepted = after.spec_num_accepted_tokens - before.spec_num_accepted_tokens;
  std::vector<int64_t> per_pos = after.spec_accepted_per_pos;
  for (size_t i = 0; i < per_pos.size() && i < before.spec_accepted_per_pos.size(); ++i)
    per_pos[i] -= before.spec_accepted_per_pos[i];
  return {{"verify_steps", rounds},
          {"draft_tokens", drafts},
          {"accepted_tokens", accepted},
          {"acceptance_rate", drafts > 0 ? static_cast<double>(accepted) / drafts : 0.0},
          {"mean_tokens_per_verify_step",
           rounds > 0 ? static_cast<double>(accepted + rounds) / rounds : 0.0},
          {"mean_accepted_length", rounds > 0 ? static_cast<double>(accepted) / rounds : 0.0},
          {"accepted_per_position", per_pos}};
}

}  // namespace tachyon::cli
