// Speculative decoding's proposers: where a sequence's draft tokens come from.
//
// Before a step, the engine asks its proposer for up to k draft tokens per decoding
// sequence; the step then computes the sequence's last token and its drafts at once
// (k + 1 logits rows) and keeps the longest prefix of the drafts the target model
// accepts, plus one token of its own (greedy: the drafts equal to the target's argmax;
// sampled: the rejection sampler, which keeps the target's distribution exactly). A
// proposer never sees the target's logits; it only learns, from the tokens of the next
// request for the same sequence, what was kept.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/generate_config.h"
#include "engine/rng.h"

namespace tachyon {

// One sequence's request for draft tokens.
struct ProposalRequest {
  int64_t seq_id = 0;
  // The sequence's tokens (prompt + generated), all known on the host. Tokens past what
  // an earlier proposal for this sequence saw may differ from what it proposed: the
  // proposer keeps the longest common prefix of its own state and recomputes the rest.
  std::span<const int32_t> tokens;
  int32_t prompt_len = 0;
  int32_t max_tokens = 0;  // k: propose at most this many (0 .. k may come back)
  // The request's sampling (temperature, top_k, top_p, min_p; greedy when
  // config->is_greedy()). A proposer that samples draws from its own distribution with
  // this key (counter-based: a draft position's draw depends only on the key and the
  // position) and reports that distribution in Proposal::probs.
  const GenerateConfig* config = nullptr;
  RngKey rng;
};

struct Proposal {
  std::vector<int32_t> tokens;  // the draft tokens, in order
  // Empty: the proposals are deterministic (a point mass at each token; greedy requests,
  // n-gram lookup). Otherwise [tokens.size(), vocab] row-major: the distribution each
  // draft token was drawn from, which the rejection sampler divides by.
  std::vector<float> probs;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;  // "ngram", "draft_model", ...
  // Fills out[i] for requests[i] (out.size() == requests.size()). Requests of one call
  // are distinct sequences; a proposer may batch them.
  virtual void propose(std::span<const ProposalRequest> requests, std::span<Proposal> out) = 0;
  // The sequence ended, was preempted or was forked away from: drop what is kept for it.
  virtual void release(int64_t seq_id) { (void)seq_id; }
};

}  // namespace tachyon
