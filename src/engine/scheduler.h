// The scheduler: which sequences advance in the next step, and by how many tokens.
//
// It deals in integers only (request and sequence ids, token counts, block ids). One
// progress rule covers prefill and decode: each sequence has num_computed tokens in the
// KV cache catching up with its num_tokens; a step advances sequences by a chunk
// (prefill, or recompute after preemption) or by one token (decode) under one token
// budget. A request ("group") holds one sequence until its prompt is done, then as many
// as it samples in parallel (n > 1 or beams); the group's sequences advance in lockstep
// and the group samples only in a step that brings all of them fully up to date.
//
// Policy: running groups first, in arrival order, decodes before prefill chunks (a long
// prompt never stalls the decodes: its chunk gets the budget the decodes leave);
// then waiting groups in FIFO order (the head blocks those behind it: no starvation),
// admitted only if their whole current length fits beside a reserve of free blocks.
// A running group whose tokens are all computed (its next one is being chosen by a step
// in flight) is skipped. When a running group cannot get its blocks, the most recently
// arrived running group is preempted. With swap space (KVCacheManager::num_swap_blocks) a group of
// one sequence that shares no block is swapped out: its blocks move to host memory, and it is
// swapped back in, where it left off, before any waiting group is admitted (oldest first, beside
// the same reserve). Otherwise its blocks are freed and it is recomputed later from its tokens. A
// prompt whose leading tokens attend bidirectionally (PromptLayout::atomic_len, a prefix LM) has
// them computed in one chunk: a chunk that starts inside them reaches their end or is not
// scheduled.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/block_pool.h"
#include "model/forward.h"

namespace tachyon {

struct SchedulerConfig {
  int32_t max_num_seqs = 128;            // sequences running at once
  int32_t max_num_batched_tokens = 512;  // tokens per step
  int32_t reserve_blocks = 0;            // free blocks admissions leave for running groups
  // Growth of the KV cache: when short of blocks, before preempting or holding back a
  // request, the pool grows by grow_blocks (KVCacheManager::grow) up to max_blocks, and
  // the step tells the model (SchedulerOutput::kv_blocks). grow_blocks 0: it never grows.
  int32_t grow_blocks = 0;
  int32_t max_blocks = 0;
  // Distinct LoRA adapters among the running groups (the model's resident adapter
  // slots): a group of another adapter waits while that many run.
  int32_t max_adapters = 0;
};

// One sequence's share of a step: it computes positions [start, start + num_tokens).
struct ScheduledSeq {
  int64_t seq_id = 0;
  int64_t group_id = 0;
  int32_t start = 0;
  int32_t num_tokens = 0;
  // Logits rows wanted, for its last num_logits positions: 0 for a prefill chunk, 1 when
  // the group samples (k + 1 for a step that verifies k draft tokens).
  int32_t num_logits = 0;
  std::vector<int32_t> block_table;  // covers positions [0, start + num_tokens)
  int32_t prompt_len = 0;            // the request's prompt (rotary scalings fixed there)
  PromptLayout layout;               // the request's prompt layout (the model's)
  int32_t adapter = 0;               // the request's LoRA adapter (0: the base model)
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  std::vector<BlockCopy> copies;          // copy-on-write, before the forward pass
  std::vector<int64_t> sampled_groups;    // groups whose sequences all caught up
  std::vector<int64_t> preempted_groups;  // groups sent back to wait (swapped out or freed)
  // Block moves before the forward pass, in this order: cache -> swap space (cache
  // block, swap block), then swap space -> cache (swap block, cache block).
  std::vector<BlockCopy> swap_out;
  std::vector<BlockCopy> swap_in;
  // Groups admitted in this step with a prefix taken from the cache: (group, tokens).
  std::vector<std::pair<int64_t, int32_t>> reused;
  int32_t num_batched_tokens = 0;
  // > 0: the cache grew to this many blocks in this step; the model's cache must hold
  // them before the block moves and the forward pass (LanguageModel::grow_kv_cache).
  int32_t kv_blocks = 0;
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KVCacheManager* kv);

  // The prefix cache's view of a sequence's tokens: those the host knows (a token a step
  // in flight chooses is not among them), from the first. Required with a prefix cache.
  using TokenSource = std::function<std::span<const int32_t>(int64_t seq_id)>;
  void set_token_source(TokenSource source) { tokens_ = std::move(source); }

  // A new request with one sequence of num_prompt_tokens tokens. max_width: the most
  // sequences it will run at once (seats are kept for them from admission on). The
  // layout's atomic_len() must fit in one step (max_num_batched_tokens) and the prompt.
  // cache_salt: the prefix cache's salt for its blocks (KVCacheManager::hash_tokens);
  // none: its blocks are never shared through the cache. adapter: the LoRA adapter it runs
  // with (0: the base model).
  void add_group(int64_t group_id, int64_t seq_id, int32_t num_prompt_tokens, int32_t max_width,
                 const PromptLayout& layout = {}, std::optional<uint64_t> cache_salt = {},
                 int32_t adapter = 0);
  // A new sequence in the parent's group, sharing its tokens and KV blocks.
  void fork_seq(int64_t parent, int64_t child);
  // The engine sampled one more token for the sequence (or will: a token a step in
  // flight chooses counts from its launch on).
  void append_token(int64_t seq_id);
  // Ends a sequence (its blocks are freed at once); its group stays.
  void remove_seq(int64_t seq_id);
  // Ends a request: all its sequences, blocks freed at once.
  void remove_group(int64_t group_id);
  // Enters the sequence's computed blocks in the prefix cache and pins them there (they
  // are never evicted); returns the tokens pinned.
  int32_t pin_seq(int64_t seq_id);

  // Speculative decoding. Whether the group's sequences may take draft tokens now: it
  // runs and each of its sequences is decoding (only its last token is not computed).
  bool can_speculate(int64_t group_id) const;
  // Appends n tentative tokens to a sequence of such a group. The next schedule()
  // computes its last token with as many of them as the token budget and the free blocks
  // allow (num_logits 1 + those kept) and drops the others; a group it does not schedule
  // or preempts drops them all. SeqState::drafts tells how many remain.
  void add_drafts(int64_t seq_id, int32_t n);
  // After the step that verified a sequence's drafts: `accepted` of them are kept (their
  // K/V is computed), the others leave with the blocks past the end. The caller then
  // appends the kept drafts and the token chosen after them (append_token, accepted + 1
  // times); the prefix cache indexes only tokens known to the host (the TokenSource,
  // which never includes drafts).
  void accept_drafts(int64_t seq_id, int32_t accepted);

  // Plans and applies the next step: blocks are taken for everything it schedules, and
  // the scheduled sequences count as computed.
  SchedulerOutput schedule();

  bool has_group(int64_t group_id) const { return groups_.count(group_id) > 0; }
  bool has_work() const { return !waiting_.empty() || !running_.empty() || !swapped_.empty(); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_swapped() const { return static_cast<int32_t>(swapped_.size()); }
  int64_t num_swap_outs() const { return num_swap_outs_; }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t num_kv_grows() const { return num_kv_grows_; }
  // Prompt tokens looked up in the prefix cache at admissions, and found.
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }
  const SchedulerConfig& config() const { return config_; }

  // Introspection for tests and stats.
  struct SeqState {
    int64_t group_id = 0;
    int32_t num_tokens = 0;
    int32_t num_computed = 0;
    int32_t prompt_len = 0;
    PromptLayout layout;
    int32_t published_blocks = 0;  // leading blocks offered to the prefix cache
    int32_t drafts = 0;            // tentative tokens at the end of num_tokens
  };
  const SeqState& seq_state(int64_t seq_id) const;
  std::vector<int64_t> waiting_groups() const;  // arrival order
  std::vector<int64_t> running_groups() const;  // arrival order
  std::vector<int64_t> swapped_groups() const;  // arrival order
  const std::vector<int64_t>& group_seqs(int64_t group_id) const;

 private:
  struct Group {
    int64_t id = 0;
    uint64_t arrival = 0;
    int32_t max_width = 1;
    bool running = false;
    bool swapped = false;  // its sequence's blocks are in swap space
    std::optional<uint64_t> cache_salt;
    int32_t adapter = 0;
    std::vector<int64_t> seqs;
  };
  struct Plan {
    // kIdle: every token of the group is computed (its next one is still being chosen).
    enum Status { kOk, kNoBudget, kNoMemory, kIdle } status = kNoBudget;
    std::vector<int32_t> take;  // tokens per sequence of the group
    bool sample = false;
    std::vector<int32_t> drafts;  // a verify step: the drafts kept per sequence
  };
  using Key = std::pair<uint64_t, int64_t>;  // (arrival, group id)

  Group& group(int64_t id);
  // Whether the group's adapter may run beside the running groups' (max_adapters), and
  // the running groups' adapters counted as a group starts or stops running.
  bool adapter_fits(const Group& g) const;
  void count_running(const Group& g, int32_t delta);
  bool is_decoding(const Group& g) const;
  // draft_reserve: tokens of the budget that drafts leave to the decodes after them.
  Plan plan_group(const Group& g, int32_t token_budget, int32_t free_blocks,
                  int32_t draft_reserve = 0) const;
  // plan_group for a group whose sequences hold drafts: each computes its last token and
  // the drafts the budget (less draft_reserve) and the free blocks leave room for.
  Plan plan_verify(const Group& g, int32_t token_budget, int32_t free_blocks,
                   int32_t draft_reserve) const;
  void drop_drafts(int64_t seq_id);
  void apply_plan(Group& g, const Plan& plan, SchedulerOutput* out);
  // Grows the pool by chunks (SchedulerConfig::grow_blocks) until `want` blocks are
  // free; false when the limit comes first (it keeps what it grew).
  bool grow_until_free(int64_t want, SchedulerOutput* out);
  // Grows the pool by one chunk; false at the limit.
  bool grow_chunk(SchedulerOutput* out);
  // Hashes the sequence's known tokens and enters its computed blocks in the cache.
  void publish(const Group& g, int64_t seq_id);
  // A waiting group's cached prefix: taken (its sequence's num_computed moves past it).
  int32_t take_cached_prefix(Group& g);
  // Gives back the prefix take_cached_prefix took (the group stays waiting).
  void drop_cached_prefix(Group& g);
  void preempt(Group& g, SchedulerOutput* out);
  void schedule_running(SchedulerOutput* out, int32_t* token_budget);
  void admit_waiting(SchedulerOutput* out, int32_t* token_budget);
  // Swaps groups back in, oldest first; false while some remain swapped out.
  bool swap_in_groups(SchedulerOutput* out, int32_t* token_budget);
  // Makes a group running and applies its plan when that is kOk.
  void start_group(Group& g, const Plan& plan, SchedulerOutput* out, int32_t* token_budget);

  SchedulerConfig config_;
  KVCacheManager* kv_;
  std::unordered_map<int64_t, Group> groups_;
  std::unordered_map<int64_t, SeqState> seqs_;
  std::set<Key> waiting_;
  std::set<Key> running_;
  std::set<Key> swapped_;
  int32_t running_width_ = 0;                    // seats held by running groups
  std::map<int32_t, int32_t> running_adapters_;  // running groups per adapter (not the base)
  uint64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_swap_outs_ = 0;
  int64_t num_kv_grows_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
  TokenSource tokens_;
  // Sequences holding drafts (add_drafts) until the step after them is verified.
  std::set<int64_t> drafted_;
};

}  // namespace tachyon
