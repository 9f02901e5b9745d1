// Speculative decoding's side of the engine loop before a step: asks the proposer for
// draft tokens for every sequence that may speculate (one batched call per step), puts
// them at the end of the sequences as tentative tokens (EngineSeq::num_drafts,
// Scheduler::add_drafts), and after scheduling keeps only those the step verifies. The
// verification itself is the StepSampler's (engine/speculation.h). The loop's thread
// only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/proposer.h"
#include "engine/request_table.h"
#include "engine/scheduler.h"

namespace tachyon {

class Drafter {
 public:
  // k: drafts per sequence and step, at most (1..16).
  Drafter(std::shared_ptr<Proposer> proposer, int32_t k, RequestTable* requests,
          Scheduler* scheduler, int32_t vocab_size, int32_t max_seq_len);

  // Whether a request's sequences speculate: not for beams (a beam step reorders and
  // forks sequences from one row each; verifying a chain per beam is another algorithm),
  // nor for grammar-constrained requests (each draft would need the matcher advanced
  // over the drafts before it, and rolled back on rejection), nor where the request says
  // so (generate_config force_disable_sp_run).
  static bool eligible(const EngineRequest& r);

  // Before scheduling: drafts for the running sequences that are decoding with every
  // token known on the host.
  void propose();
  // After scheduling: the sequences keep the drafts the scheduler kept for them.
  void sync();
  // The sequence ended, or was preempted: the proposer drops what it kept for it.
  void release(int64_t seq_id) { proposer_->release(seq_id); }

  int32_t k() const { return k_; }
  const Proposer& proposer() const { return *proposer_; }

 private:
  std::shared_ptr<Proposer> proposer_;
  int32_t k_ = 0;
  RequestTable* requests_;
  Scheduler* scheduler_;
  int32_t vocab_size_ = 0;
  int32_t max_seq_len_ = 0;
  std::vector<int64_t> drafted_;  // the sequences given drafts by the last propose()
  std::vector<ProposalRequest> reqs_;
  std::vector<Proposal> props_;
};

}  // namespace tachyon
