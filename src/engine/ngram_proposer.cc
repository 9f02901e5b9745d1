#include "engine/ngram_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

NgramProposer::NgramProposer(int32_t min_match, int32_t max_match)
    : min_match_(min_match), max_match_(max_match) {
  if (min_match < 1 || max_match < min_match)
    raise<InvalidArgument>(
        "n-gram lookup needs 1 <= prompt_lookup_min <= prompt_lookup_max (got {} and {})",
        min_match, max_match);
}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> tokens, int32_t min_match,
                                           int32_t max_match, int32_t k) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_match, len - 1); n >= min_match; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    // The most recent occurrence that ends before the suffix starts to overlap its own
    // last token (an occurrence with at least one token after it).
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (tokens[static_cast<size_t>(i)] != suffix[0]) continue;
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n;
      const int64_t to = std::min(len, from + k);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

void NgramProposer::propose(std::span<const ProposalRequest> requests, std::span<Proposal> out) {
  TACHYON_CHECK_EQ(requests.size(), out.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    out[i].tokens = lookup(requests[i].tokens, min_match_, max_match_, requests[i].max_tokens);
    out[i].probs.clear();
  }
}

}  // namespace tachyon
