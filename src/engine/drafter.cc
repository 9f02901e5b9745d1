#include "engine/drafter.h"

#include <algorithm>

#include "core/error.h"
#include "engine/speculation.h"

namespace tachyon {

Drafter::Drafter(std::shared_ptr<Proposer> proposer, int32_t k, RequestTable* requests,
                 Scheduler* scheduler, int32_t vocab_size, int32_t max_seq_len)
    : proposer_(std::move(proposer)),
      k_(k),
      requests_(requests),
      scheduler_(scheduler),
      vocab_size_(vocab_size),
      max_seq_len_(max_seq_len) {
  TACHYON_CHECK(proposer_ != nullptr);
  if (k_ < 1 || k_ > 16) raise<InvalidArgument>("num_speculative_tokens {} must be in [1, 16]", k_);
}

bool Drafter::eligible(const EngineRequest& r) {
  const GenerateConfig& c = r.cfg;
  return !c.is_beam_search() && !c.grammar && !c.force_disable_sp_run;
}

void Drafter::propose() {
  drafted_.clear();
  reqs_.clear();
  std::vector<EngineSeq*> seqs;
  for (int64_t id : scheduler_->running_groups()) {
    EngineRequest* r = requests_->find(id);
    // n > 1: the prompt's sequence is split into n at its first sample, not before.
    if (!r || !eligible(*r) || !(r->forked || r->cfg.num_return_sequences == 1)) continue;
    if (!scheduler_->can_speculate(id)) continue;
    for (auto& sp : r->seqs) {
      EngineSeq& s = *sp;
      if (s.finished || !s.pending.empty() || s.num_drafts != 0) continue;
      const int32_t len = static_cast<int32_t>(s.tokens.size());
      // Room for the drafts and the token after them.
      const int32_t room =
          std::min(r->max_new_tokens - (len - r->prompt_len), max_seq_len_ - len) - 1;
      const int32_t k = std::min(k_, room);
      if (k <= 0) continue;
      ProposalRequest q;
      q.seq_id = s.id;
      q.tokens = s.tokens;
      q.prompt_len = r->prompt_len;
      q.max_tokens = k;
      q.config = &r->cfg;
      q.rng = RngKey{r->seed, static_cast<uint32_t>(s.index),
                     static_cast<uint64_t>(len - r->prompt_len), kRngPurposeProposal};
      reqs_.push_back(q);
      seqs.push_back(&s);
    }
  }
  if (reqs_.empty()) return;
  props_.assign(reqs_.size(), Proposal{});
  proposer_->propose(reqs_, props_);
  const size_t vocab = static_cast<size_t>(vocab_size_);
  for (size_t i = 0; i < reqs_.size(); ++i) {
    Proposal& p = props_[i];
    EngineSeq& s = *seqs[i];
    TACHYON_CHECK(p.probs.empty() || p.probs.size() == p.tokens.size() * vocab,
                  "proposer {}: {} probabilities for {} drafts", proposer_->name(), p.probs.size(),
                  p.tokens.size());
    // At most k, and none past a token outside the vocabulary.
    size_t n = std::min(p.tokens.size(), static_cast<size_t>(reqs_[i].max_tokens));
    for (size_t j = 0; j < n; ++j)
      if (p.tokens[j] < 0 || p.tokens[j] >= vocab_size_) n = j;
    if (n == 0) continue;
    s.tokens.insert(s.tokens.end(), p.tokens.begin(), p.tokens.begin() + static_cast<ptrdiff_t>(n));
    s.num_drafts = static_cast<int32_t>(n);
    s.draft_probs.clear();
    if (!p.probs.empty())
      s.draft_probs.assign(p.probs.begin(), p.probs.begin() + static_cast<ptrdiff_t>(n * vocab));
    scheduler_->add_drafts(s.id, s.num_drafts);
    drafted_.push_back(s.id);
  }
}

void Drafter::sync() {
  for (int64_t id : drafted_) {
    if (!requests_->has_seq(id)) continue;
    EngineSeq& s = requests_->seq(id);
    const int32_t kept = scheduler_->seq_state(id).drafts;
    if (kept == s.num_drafts) continue;
    TACHYON_CHECK(kept < s.num_drafts, "sequence {}: {} drafts kept of {}", id, kept, s.num_drafts);
    s.tokens.resize(s.tokens.size() - static_cast<size_t>(s.num_drafts - kept));
    s.num_drafts = kept;
    if (!s.draft_probs.empty())
      s.draft_probs.resize(static_cast<size_t>(kept) * static_cast<size_t>(vocab_size_));
    if (kept == 0) s.draft_probs.clear();
  }
  drafted_.clear();
}

}  // namespace tachyon
