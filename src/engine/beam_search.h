// Beam search over one request, as transformers does it (early_stopping=False):
// each step keeps the 2 * num_beams best (beam, token) continuations by summed
// log-probability; continuations that end (EOS, or the length limit) become finished
// hypotheses if ranked within the first num_beams, scored sum_logprobs /
// generated_len^length_penalty (generated_len counts the EOS); the best num_beams others
// run on. The search ends when the best running beam, normalised by its current length,
// can no longer beat the worst of num_beams finished hypotheses.
//
// Pure bookkeeping on integers and scores: the engine gives it each running beam's
// processed log-probabilities and forks/drops sequences by what it returns.
#pragma once

#include <cstdint>
#include <vector>

namespace tachyon {

class BeamSearch {
 public:
  // eos_ids: tokens that finish a beam (empty with ignore_eos).
  BeamSearch(int32_t num_beams, float length_penalty, int32_t max_new_tokens,
             std::vector<int32_t> eos_ids);

  struct Candidate {
    int32_t parent = 0;  // index of the running beam it extends
    int32_t token = 0;
    double score = 0.0;  // summed log-probability
  };
  struct Hypothesis {
    std::vector<int32_t> tokens;  // generated tokens, the final EOS excluded
    double score = 0.0;           // length-normalised
    double sum_logprobs = 0.0;
    bool ended_with_eos = false;
  };

  // One step. log_probs[b] points at running beam b's processed log-probabilities
  // [vocab]; beam_tokens[b] are the tokens it generated so far (all beams have the
  // same count). Returns the next running beams, best first; empty when the search
  // is over (then call results()).
  std::vector<Candidate> step(const std::vector<const float*>& log_probs, int32_t vocab,
                              const std::vector<std::vector<int32_t>>& beam_tokens);

  bool done() const { return done_; }
  // Finished hypotheses, best first (at most num_beams).
  const std::vector<Hypothesis>& results() const { return finished_; }
  // Summed log-probabilities of the running beams, in the order step() returned them.
  const std::vector<double>& running_scores() const { return running_scores_; }

 private:
  void add_finished(Hypothesis h);

  int32_t num_beams_;
  float length_penalty_;
  int32_t max_new_tokens_;
  std::vector<int32_t> eos_ids_;
  std::vector<double> running_scores_{0.0};
  std::vector<Hypothesis> finished_;  // best first
  bool improvement_possible_ = true;
  bool done_ = false;
};

}  // namespace tachyon
