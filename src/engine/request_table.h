// The requests in the engine's loop and their sequences: taken in from submit(), given
// new sequences (n samples, beams), ended (a sequence, a request) with their last events,
// and the events gathered for the requests' streams until the loop hands them over
// (flush). The loop's thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/beam_search.h"
#include "engine/executor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "grammar/matcher.h"

namespace tachyon {

// One sequence: the prompt and what it generated so far.
struct EngineSeq {
  int64_t id = 0;
  int32_t index = 0;  // output index (sampling) or rank (beam)
  std::vector<int32_t> tokens;
  double cum_logprob = 0;
  bool finished = false;
  // Tokens that launched steps chose and the host has not seen: placeholders in
  // `tokens`, oldest first, at most one per step in flight.
  std::vector<PendingToken> pending;
  // The last step that computed tokens of it, and how many.
  int64_t last_step = -1;
  int32_t last_step_tokens = 0;
  // Drops the placeholders (the sequence ends before them).
  void drop_pending() {
    if (pending.empty()) return;
    tokens.resize(pending.front().index);
    pending.clear();
  }
  // Speculative decoding's draft tokens, from a proposal until the step that verifies
  // them is processed: the last num_drafts of `tokens` (never with placeholders), and the
  // distributions they were drawn from ([num_drafts, vocab]; empty: point masses).
  int32_t num_drafts = 0;
  std::vector<float> draft_probs;
  // The tokens the host knows for sure (drafts and placeholders excluded).
  size_t num_known() const {
    return pending.empty() ? tokens.size() - static_cast<size_t>(num_drafts)
                           : pending.front().index;
  }
  void drop_drafts() {
    tokens.resize(tokens.size() - static_cast<size_t>(num_drafts));
    num_drafts = 0;
    draft_probs.clear();
  }
  std::chrono::steady_clock::time_point last_token;
  // Where its text stands in the request's grammar (GenerateConfig::grammar), if any.
  std::optional<grammar::GrammarMatcher> matcher;
  std::vector<uint32_t> mask;  // its allowed tokens for a step sampled on the device
};

struct EngineRequest {
  int64_t id = 0;
  GenerateConfig cfg;
  std::vector<int32_t> prompt;  // until the first sequence takes it
  int32_t prompt_len = 0;
  PromptLayout layout;  // the model's reading of the prompt
  // The prefix cache's salt for its blocks; none: they are not shared.
  std::optional<uint64_t> cache_salt;
  int32_t adapter = 0;                         // its LoRA adapter (0: the base model)
  std::shared_ptr<const PromptImages> images;  // its prompt's images (null: none)
  // Set for a prompt to pin in the prefix cache (AsyncModel::pin_prefix): its blocks are
  // pinned when its sequence ends, and the tokens pinned stored here.
  std::shared_ptr<std::atomic<int32_t>> pinned;
  int32_t max_new_tokens = 0;
  uint64_t seed = 0;
  std::shared_ptr<RequestStream> stream;

  // Live sequences: by output index when sampling, best first for beams. Finished
  // sampled sequences stay (marked) until the request ends.
  std::vector<std::unique_ptr<EngineSeq>> seqs;
  bool forked = false;  // the prompt's sequence has been split into n
  int32_t outputs_done = 0;
  std::unique_ptr<BeamSearch> beam;

  std::chrono::steady_clock::time_point submitted;
  std::chrono::steady_clock::time_point deadline;
  bool scheduled = false;
  bool first_token = false;
  int64_t last_step = -1;
  RequestTimings timings;
};

class RequestTable {
 public:
  // in_flight: the engine's count of requests not yet ended (decremented here).
  RequestTable(Scheduler* scheduler, std::atomic<int64_t>* in_flight)
      : scheduler_(scheduler), in_flight_(in_flight) {}

  // Takes a submitted request in: its first sequence takes the prompt, and its group
  // goes to the scheduler.
  void add(std::unique_ptr<EngineRequest> r);
  EngineRequest* find(int64_t id);  // null once it ended
  EngineRequest& at(int64_t id) { return *reqs_.at(id); }
  EngineSeq& seq(int64_t id) { return *seqs_.at(id); }
  const EngineSeq& seq(int64_t id) const { return *seqs_.at(id); }
  bool has_seq(int64_t id) const { return seqs_.count(id) != 0; }
  // The requests' ids, in submission order.
  std::vector<int64_t> ids() const;

  // A new sequence of r, not yet among r.seqs (make_seq) or added to them (new_seq: with
  // a constraint, its matcher is a copy of the first sequence's, or a fresh one).
  std::unique_ptr<EngineSeq> make_seq(int32_t index, std::vector<int32_t> tokens);
  int64_t new_seq(EngineRequest& r, int32_t index, std::vector<int32_t> tokens);
  // Replaces r's beams (the old ones let go of their blocks).
  void replace_seqs(EngineRequest& r, std::vector<std::unique_ptr<EngineSeq>> fresh);

  // Ends a sequence with its last event (`event`, completed, or an empty one).
  void finish_seq(EngineRequest& r, EngineSeq& s, FinishReason reason, StreamEvent* event);
  // Ends the request: its sequences still running, then the last event. r is gone after.
  void finish_request(EngineRequest& r, FinishReason reason, const ErrorInfo* error);
  void fail_request(EngineRequest& r, const std::exception& e);
  void fail_all(ErrorCode code, const std::string& message);
  // Ends the requests whose timeout_ms has passed.
  void check_deadlines(std::chrono::steady_clock::time_point now);
  // Ends sequence `index` of request `id` as stopped, if it still runs (a stop string the
  // frontend found); the request ends with its last sequence.
  void stop_sequence(int64_t id, int32_t index);

  // Fills s.mask with the tokens s's matcher allows next (for a row sampled on the
  // device); empty when the matcher cannot (InvalidArgument: a grammar too ambiguous).
  static std::span<const uint32_t> fill_mask(EngineSeq& s, int32_t vocab_size);

  void emit(EngineRequest& r, StreamEvent e) { outbox_.emplace_back(r.stream, std::move(e)); }
  // Called with the id of every sequence that ends (finished, or replaced by beams).
  void set_on_seq_end(std::function<void(int64_t)> fn) { on_seq_end_ = std::move(fn); }
  // Hands the events gathered to their streams, each stream's in one push.
  void flush();

  int64_t requests_finished() const { return requests_finished_; }

 private:
  Scheduler* scheduler_;
  std::atomic<int64_t>* in_flight_;
  std::unordered_map<int64_t, std::unique_ptr<EngineRequest>> reqs_;
  std::unordered_map<int64_t, EngineSeq*> seqs_;
  int64_t next_seq_id_ = 0;
  std::vector<std::pair<std::shared_ptr<RequestStream>, StreamEvent>> outbox_;
  int64_t requests_finished_ = 0;
  std::function<void(int64_t)> on_seq_end_;
};

}  // namespace tachyon
