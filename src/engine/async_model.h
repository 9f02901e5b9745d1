// The asynchronous engine. Requests are submitted from any thread and answered on
// their own streams; one background thread loops: take new requests, cancellations and
// stops (RequestTable), ask the Scheduler for a step, have the ModelExecutor build its
// batch and run it, turn its results into tokens (StepSampler), stream them. The model
// is reached only through LanguageModel, so the loop is the same for every backend.
//
//   auto engine = std::make_shared<AsyncModel>(model, EngineConfig{});
//   auto stream = engine->submit({prompt_ids, config});
//   while (auto ev = stream->next(std::chrono::seconds(1))) { ... if (ev->done) break; }
//
// The engine deals in token ids only: text (detokenizing, stop strings) is the
// frontend's (frontend/output_processor.h), which ends a sequence whose text holds a
// stop string through RequestStream::stop_sequence.
//
// Failure model: a request's own error (bad logits, a forward pass that fails for its
// sequence alone) ends that request with a message; a fault of the model as a whole
// (an Internal error) ends every request and the engine, after which healthy() is false
// and submit() throws Unavailable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/beam_search.h"
#include "engine/drafter.h"
#include "engine/executor.h"
#include "engine/request.h"
#include "engine/request_table.h"
#include "engine/scheduler.h"
#include "engine/step_sampler.h"
#include "model/forward.h"

namespace tachyon {

struct EngineConfig {
  int32_t block_size = 16;  // tokens per KV block
  // KV cache capacity, first rule that applies: an explicit block count; a byte budget;
  // a fraction of memory_available_bytes (what the device has free, filled in by the
  // caller who knows the device); else room for max_num_seqs sequences of 256 tokens.
  int32_t num_kv_blocks = 0;
  int64_t kv_cache_bytes = 0;
  double kv_cache_memory_fraction = 0.0;
  int64_t memory_available_bytes = 0;
  // > 0, on a model whose cache can grow (LanguageModel::can_grow_kv_cache): the cache
  // starts with this many blocks and grows by as many whenever it is short (before any
  // preemption), up to the capacity above. 0: the whole capacity at once.
  int32_t kv_grow_blocks = 0;
  // Share of blocks that admissions leave free for running requests to grow into.
  double kv_reserve_fraction = 0.02;
  // Host memory for preempted sequences' KV blocks (swapped out and back instead of
  // recomputed), where the model can swap (LanguageModel::init_kv_swap); 0: none.
  int64_t swap_space_bytes = 0;
  // Automatic prefix caching: full KV blocks are kept, keyed by a hash chained over
  // their tokens (and the request's cache salt), after their sequence ends or is
  // preempted, until their memory is needed; a request reuses the longest cached prefix
  // of its prompt and computes only the rest.
  bool prefix_caching = true;
  // Host memory for a second tier of the prefix cache: cached blocks evicted from the
  // device are copied there and brought back on a hit; 0: none. Beside swap_space_bytes.
  int64_t prefix_cache_host_bytes = 0;

  int32_t max_num_seqs = 128;            // sequences in flight
  int32_t max_num_batched_tokens = 512;  // tokens per step (>= max_num_seqs)
  int32_t max_queue_size = 100000;       // requests in the engine; beyond: ResourceExhausted

  std::vector<int32_t> eos_token_ids;  // empty: none (sequences end by length only)
  // Choose tokens on the model's device when it can (LanguageModel::samples_on_device):
  // only token ids come back, except for rows that need the host (logprobs, beams).
  bool device_sampling = true;
  // With device sampling: queue the next step before the host has seen the tokens of
  // the one in flight (LanguageModel::launch; they stay on the device as the next
  // step's inputs), so that scheduling, batch building and streaming overlap the
  // device's work. A step is queued ahead only when every request it samples for
  // chooses its tokens on the device from values that do not depend on earlier
  // tokens' values (no logprobs, beams, repetition / presence / frequency penalties,
  // n-gram or bad-word bans); otherwise the engine waits for it first.
  bool overlap_steps = true;

  // Speculative decoding: where draft tokens come from (null: none), and how many a
  // sequence takes per step at most (1..16). Each step asks the proposer for drafts for
  // the decoding sequences whose tokens the host knows, computes them with the last
  // token (num_speculative_tokens + 1 logits rows) and keeps what the target model
  // accepts (engine/speculation.h). A step that may be followed by a proposal is never
  // queued ahead (overlap_steps): the proposal must see its tokens.
  std::shared_ptr<Proposer> proposer;
  int32_t num_speculative_tokens = 5;
};

struct EngineStats {
  bool healthy = true;
  int32_t num_waiting = 0;  // requests, not sequences (swapped-out ones included)
  int32_t num_running = 0;
  int32_t num_kv_blocks = 0;    // reserved now
  int32_t max_kv_blocks = 0;    // the capacity it may grow to (EngineConfig::kv_grow_blocks)
  int32_t num_free_blocks = 0;  // of those reserved
  int64_t num_kv_grows = 0;
  int32_t block_size = 0;
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;  // swapped out or sent back to be recomputed
  int64_t num_swap_outs = 0;    // of those, swapped out
  int32_t num_swap_blocks = 0;
  int32_t num_free_swap_blocks = 0;
  // The prefix cache: prompt tokens looked up and found at admissions (vLLM's
  // prefix_cache_queries and prefix_cache_hits), those found brought back from the host
  // tier, the blocks in its index now (in use or free), those of them pinned, and the
  // host tier's capacity in blocks.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t prefix_cache_host_hits = 0;
  int32_t num_cached_blocks = 0;
  int32_t num_pinned_blocks = 0;
  int32_t num_host_cache_blocks = 0;  // the host tier's capacity
  int64_t requests_submitted = 0;
  int64_t requests_finished = 0;
  int64_t tokens_computed = 0;   // tokens through the model (prompts, recomputes, decodes)
  int64_t tokens_generated = 0;  // tokens sampled
  // Steps queued while the step before them was still in flight (EngineConfig::
  // overlap_steps), and the tokens computed for sequences that had already ended (a
  // sequence whose token in flight is its last, by EOS or a stop word, may have its
  // next token computed in the step queued behind it).
  int64_t overlapped_steps = 0;
  int64_t tokens_discarded = 0;
  // Cumulative time of the steps (each a whole loop iteration: taking new requests,
  // scheduling, the forward pass, sampling, pushing events), and parts of it; everything
  // but the forward pass is the engine's overhead.
  // With overlap_steps the host's phases run while the device computes the step queued
  // before, so forward_ms is then the time the loop waits for the device's results.
  double step_ms = 0;
  double schedule_ms = 0;  // scheduler, queueing the block moves, batch building, launch
  // The forward pass: waiting for a step's results (LanguageModel::collect), and the
  // time of launch() where it computes the step itself (LanguageModel::launch_computes).
  double forward_ms = 0;
  double sample_ms = 0;  // sampling, streaming
  // CPU time of the engine thread in the same phases: what the engine itself costs,
  // unaffected by other processes competing for the cores.
  double schedule_cpu_ms = 0;
  double sample_cpu_ms = 0;
  // Speculative decoding (vLLM's spec_decode counters): verify steps of a sequence with
  // drafts, the drafts computed, those accepted, and acceptances per draft position.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
};

class AsyncModel {
 public:
  // Sizes the KV cache (LanguageModel::init_kv_cache) and starts the loop.
  AsyncModel(std::shared_ptr<LanguageModel> model, EngineConfig config);
  ~AsyncModel();
  AsyncModel(const AsyncModel&) = delete;
  AsyncModel& operator=(const AsyncModel&) = delete;

  // Checks the request (InvalidArgument naming the field, stop strings included: they
  // are the frontend's; ResourceExhausted when it could never fit the KV cache or the
  // queue is full; Unavailable once the engine is shut down or dead) and queues it.
  std::shared_ptr<RequestStream> submit(GenerateRequest request);

  // Computes the K/V of `prompt_ids` and pins its full blocks in the prefix cache: they
  // are never evicted, and every request whose prompt starts with these tokens reuses
  // them (system prompts). Blocks until done; returns the tokens pinned (the prompt's
  // whole blocks). Throws InvalidArgument for an empty or too long prompt, or when
  // prefix caching is off.
  int32_t pin_prefix(std::vector<int32_t> prompt_ids);

  // LoRA adapters: registers an adapter the model prepared (Model::prepare_adapter) under
  // a new id > 0 for requests to name (GenerateRequest::adapter), taken into the model
  // before the next step; and removes one, which no request in the engine may run with
  // then (the caller waits for those to end). InvalidArgument for an id in use, or a
  // model without room for adapters.
  void add_adapter(int32_t id, std::shared_ptr<const PreparedAdapter> adapter);
  void remove_adapter(int32_t id);

  // Ends every request still in flight (FinishReason::kError, Unavailable) and stops
  // the loop. Idempotent; the destructor calls it.
  void shutdown();

  EngineStats stats() const;
  bool healthy() const { return !dead_.load() && !stopped_.load(); }
  // Why the engine died (empty while healthy).
  std::string dead_reason() const;

  const EngineConfig& config() const { return config_; }
  int32_t num_kv_blocks() const { return num_blocks_; }
  int32_t vocab_size() const { return vocab_size_; }
  // The tokens that end a sequence (EngineConfig::eos_token_ids).
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  int32_t max_seq_len() const { return max_seq_len_; }

 private:
  struct Inbox;

  // A step queued on the model whose output has not been collected yet.
  struct Step {
    int64_t no = 0;
    SchedulerOutput plan;
    // Its sampled sequences hold placeholders for its tokens (EngineSeq::pending): the
    // next step may be queued before this one is collected.
    bool ahead = false;
  };

  std::shared_ptr<RequestStream> enqueue(GenerateRequest request,
                                         std::shared_ptr<std::atomic<int32_t>> pinned);
  void loop();
  // The adapters added and removed since the loop looked, into the model.
  void take_adapters();
  void take_inbox(std::vector<std::unique_ptr<EngineRequest>>* incoming,
                  std::vector<int64_t>* cancels, std::vector<std::pair<int64_t, int32_t>>* stops,
                  bool* stop);
  // Schedules and queues the next step; false when there was nothing to run.
  bool launch_step();
  // Collects the oldest launched step and streams its results.
  void finish_step();
  // After a launch that failed for some sequence: collects the steps in flight, then
  // runs the plan's sequences one at a time, ending the requests whose sequence fails.
  void run_one_by_one(const SchedulerOutput& plan);
  // What the executor reads of a scheduled sequence.
  SeqInputs seq_inputs(const ScheduledSeq& s) const;
  // Whether a request's tokens can be chosen a step ahead of the host seeing them.
  bool can_overlap(const EngineRequest& r) const;
  // Placeholders for the tokens an overlapped step chooses (EngineSeq::pending), for
  // each of its sampled sequences that goes on after that token.
  void add_pending(const Step& step);
  void die(const std::string& reason);
  void update_stats();

  std::shared_ptr<LanguageModel> model_;
  EngineConfig config_;
  int32_t vocab_size_ = 0;
  int32_t max_seq_len_ = 0;
  int32_t num_blocks_ = 0;
  LanguageModel::PrefixReuse prefix_reuse_ = LanguageModel::PrefixReuse::kNever;
  std::vector<int32_t> eos_ids_;
  uint64_t base_seed_ = 0;

  // Loop-thread state.
  std::unique_ptr<KVCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelExecutor> executor_;
  std::deque<Step> steps_;  // launched and not collected, oldest first (at most two)
  bool overlap_ = false;    // config_.overlap_steps with device sampling
  std::unique_ptr<RequestTable> requests_;
  std::unique_ptr<StepSampler> sampler_;
  std::unique_ptr<Drafter> drafter_;  // with a proposer
  EngineStats loop_stats_;

  std::shared_ptr<Inbox> inbox_;
  std::atomic<int64_t> next_request_id_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> dead_{false};
  std::atomic<bool> stopped_{false};
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::string dead_reason_;
  std::thread thread_;
};

}  // namespace tachyon
