// From a step's results to the sequences' next tokens: samples the host's logits rows
// (in parallel on the compute pool, each worker with its own Sampler) or takes the
// tokens the device chose, splits a prompt into its n samples, steps beam search,
// appends the tokens, ends the sequences that stop (EOS, stop words, length) and
// gathers their events in the RequestTable. The engine loop's thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/executor.h"
#include "engine/request_table.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace tachyon {

// Speculative decoding's counts (EngineStats::spec_*).
struct SpeculationCounts {
  int64_t drafts = 0;  // verify steps of a sequence
  int64_t draft_tokens = 0;
  int64_t accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;
};

class StepSampler {
 public:
  StepSampler(RequestTable* requests, Scheduler* scheduler, std::vector<int32_t> eos_ids,
              int32_t vocab_size, int32_t max_seq_len)
      : requests_(requests),
        scheduler_(scheduler),
        eos_ids_(std::move(eos_ids)),
        vocab_size_(vocab_size),
        max_seq_len_(max_seq_len) {}

  // The tokens of the groups' sequences from their rows of step step_no (-1: a step not
  // queued ahead, run alone). A request whose row fails (bad logits, no allowed token)
  // ends with the error.
  void process(const std::vector<int64_t>& groups, LogitRows& rows, int64_t step_no);

  int64_t tokens_generated() const { return tokens_generated_; }
  // Tokens computed in a step queued after a sequence's last one (EngineStats).
  int64_t tokens_discarded() const { return tokens_discarded_; }
  const SpeculationCounts& speculation() const { return spec_; }

 private:
  void beam_group(EngineRequest& r, LogitRows& rows);
  void on_token(EngineRequest& r, EngineSeq& s, const SampledToken& t, int64_t step_no);
  // The tokens a verify step kept for s (the accepted drafts, then the target's token):
  // the rejected drafts leave, the kept tokens are taken until one ends the sequence.
  void on_verified(EngineRequest& r, EngineSeq& s, const std::vector<SampledToken>& tokens,
                   int64_t step_no);

  RequestTable* requests_;
  Scheduler* scheduler_;
  std::vector<int32_t> eos_ids_;
  int32_t vocab_size_ = 0;
  int32_t max_seq_len_ = 0;
  std::vector<Sampler> samplers_;  // one per compute thread
  std::vector<float> beam_scratch_;
  int64_t tokens_generated_ = 0;
  int64_t tokens_discarded_ = 0;
  SpeculationCounts spec_;
};

}  // namespace tachyon
