// Speculative decoding's verification: which of a sequence's draft tokens the target
// model keeps, and the token it adds after them.
//
// A verify step computes a sequence's last token and its k drafts at once, giving k + 1
// rows of logits: row i is the target's prediction after the drafts before i. Greedy
// requests keep the drafts while each equals the target's choice at its position, then
// take the target's own token there (1 .. k + 1 tokens, exactly what plain decoding
// chooses). Sampled requests use the rejection sampler: draft x at position i is accepted
// with probability min(1, p(x) / q(x)); at the first rejection the token is drawn from
// normalize(max(0, p - q)); after k acceptances a bonus token is drawn from the last row.
// p is the target's processed distribution at that position (logits processors with the
// context that position sees, then temperature / top_k / top_p / min_p), q the proposal's
// (a point mass for deterministic proposals): each kept token is distributed exactly as
// plain sampling's. Every draw is keyed by the sequence's seed, index and output
// position (rng.h), so results do not depend on batch neighbours.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/generate_config.h"
#include "engine/rng.h"
#include "engine/sampler.h"

namespace tachyon {

// RngKey::purpose of speculative decoding's draws (0 is the plain draw of a position).
inline constexpr uint32_t kRngPurposeAccept = 1;    // the acceptance test of a draft
inline constexpr uint32_t kRngPurposeResidual = 2;  // the draw after a rejection
inline constexpr uint32_t kRngPurposeProposal = 3;  // a proposer's own draws

// The distribution a config's draw makes from processed logits [vocab], as
// Sampler::choose draws (temperature, then top_k, top_p and min_p; greedy: a point mass
// at the argmax), into *p (normalized). Throws InvalidArgument as argmax does.
void draw_distribution(const float* processed, int32_t vocab, const GenerateConfig& config,
                       std::vector<float>* p);

// The index drawn from non-negative weights with a uniform u in [0, 1) (the last index of
// positive weight when rounding runs past the end); -1 when every weight is 0.
int32_t draw_index(std::span<const float> weights, double u);

// One draft position of the rejection sampler. p: the target's distribution; q: the one
// the draft was drawn from (empty: a point mass at `draft`). u_accept decides acceptance,
// u_residual the draw from normalize(max(0, p - q)) after a rejection.
struct DraftVerdict {
  bool accepted = false;
  int32_t token = -1;  // the draft when accepted, else the residual draw
};
DraftVerdict judge_draft(std::span<const float> p, int32_t draft, std::span<const float> q,
                         double u_accept, double u_residual);

// One sequence's verify rows.
struct VerifyInput {
  const GenerateConfig* config = nullptr;
  std::span<const int32_t> tokens;  // prompt, generated tokens, then the drafts
  int32_t prompt_len = 0;
  int32_t num_drafts = 0;              // the last num_drafts of `tokens`
  std::span<const float* const> rows;  // num_drafts + 1 raw logits rows [vocab]
  std::span<const float> draft_probs;  // empty, or [num_drafts, vocab]: the proposal's q
  std::span<const int32_t> eos_ids;
  uint64_t seed = 0;
  uint32_t seq_index = 0;
};

// The tokens kept, in order: the accepted drafts, then the target's token (1 ..
// num_drafts + 1), each reported as Sampler::sample reports a token.
std::vector<SampledToken> verify_drafts(Sampler& sampler, const VerifyInput& in, int32_t vocab);

}  // namespace tachyon
