// What the benchmarks (bench, bench-serving) report from their measurements.
#pragma once

#include <vector>

#include "core/json.h"
#include "engine/async_model.h"

namespace tachyon::cli {

// The p-th percentile (0..100) of v, interpolated between ranks; 0 for none.
double percentile(std::vector<double> v, double p);
// {"mean", "p10", "p50", "p90", "p99"} of v.
Json dist(const std::vector<double>& v);
// The multi-turn figures: TTFT p50 of each turn, of the first and of the later turns.
void add_turn_report(const std::vector<std::vector<double>>& ttft_by_turn, Json* report);
// Speculative decoding between two readings of the engine's stats: verify steps with
// drafts, draft tokens, accepted tokens, the acceptance rate, the mean tokens a verify
// step produced (accepted + 1) and the acceptances per draft position.
Json speculation_report(const EngineStats& before, const EngineStats& after);

}  // namespace tachyon::cli
