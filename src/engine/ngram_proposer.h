// Prompt lookup (n-gram) proposals: the drafts of a sequence are the tokens that followed
// the most recent earlier occurrence of its last n tokens in its own context (prompt and
// output), n from max_match down to min_match. Cheap and often right where the output
// repeats its input (quoting, editing, summarizing, code): vLLM's "ngram" method and
// RTP-LLM's "deterministic" one. Proposals are point masses and depend only on the
// sequence's tokens, so nothing is kept between steps.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/proposer.h"

namespace tachyon {

class NgramProposer : public Proposer {
 public:
  // 1 <= min_match <= max_match (InvalidArgument otherwise).
  NgramProposer(int32_t min_match, int32_t max_match);

  std::string_view name() const override { return "ngram"; }
  void propose(std::span<const ProposalRequest> requests, std::span<Proposal> out) override;

  // The up to k tokens after the most recent earlier occurrence of the last n tokens of
  // `tokens`, for the largest n in [min_match, max_match] that has one (empty: none).
  static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t min_match,
                                     int32_t max_match, int32_t k);

 private:
  int32_t min_match_;
  int32_t max_match_;
};

}  // namespace tachyon
