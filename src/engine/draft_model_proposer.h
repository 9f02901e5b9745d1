// Speculative decoding's draft-model proposer: a small model of the same vocabulary
// (loaded like any model, on the target's device) runs ahead of the target and proposes
// its own continuation of each sequence.
//
// The draft keeps a paged KV cache of its own: a fixed number of blocks handed out from
// a free list, and per sequence the blocks it holds and the tokens whose K/V they hold.
// A call to propose() keeps, for each request, the longest common prefix of those tokens
// and the request's tokens (what the target accepted of the last proposals), computes
// the rest in chunks (all sequences in one forward pass per step, within the proposer's
// own batch limits), then runs k single-token steps batched over the sequences. The K/V
// of the drafts it proposed stay in its cache (most are accepted); the next call's
// common prefix drops the rest.
//
// Each draft token is chosen as the target's sampler would choose from the draft's
// logits: the request's logits processors (penalties, bias, bans, EOS before
// min_new_tokens), then argmax for greedy requests; for sampled ones the draw from the
// request's temperature / top-k / top-p / min-p distribution, keyed by the request's
// RngKey advanced by the draft's position (step + j), whose probabilities come back in
// Proposal::probs. Drafting a sequence stops after an EOS token (unless ignore_eos).
//
// Never fails a step for want of room: a sequence whose tokens do not fit the free
// blocks (after taking back the blocks of sequences absent from the call, least
// recently used first) gets fewer drafts, or none. An error of the draft model itself
// (a failed forward pass) is logged and gives no drafts for the call's sequences, whose
// state is dropped. Not thread-safe: the engine's loop calls propose() and release().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/proposer.h"
#include "engine/sampler.h"
#include "model/forward.h"

namespace tachyon {

struct DraftProposerConfig {
  int32_t num_blocks = 0;  // KV blocks of the draft's cache (> 0)
  int32_t block_size = 16;
  // A step's limits: tokens of the catch-up chunks, and sequences.
  int32_t max_batch_tokens = 512;
  int32_t max_batch_seqs = 64;
  // Width of Proposal::probs' rows: the target's vocabulary (0: the draft's). Logits of
  // draft ids at or past it are dropped; ids the draft lacks have probability 0.
  int32_t vocab_size = 0;
  // The target's EOS ids: drafting stops after one, and min_new_tokens bans them.
  std::vector<int32_t> eos_token_ids;
};

class DraftModelProposer final : public Proposer {
 public:
  // Allocates the draft's KV cache (draft->init_kv_cache). Throws InvalidArgument on a
  // bad configuration (no blocks, a limit below 1).
  DraftModelProposer(std::shared_ptr<LanguageModel> draft, DraftProposerConfig config);

  std::string_view name() const override { return "draft_model"; }
  void propose(std::span<const ProposalRequest> requests, std::span<Proposal> out) override;
  void release(int64_t seq_id) override;

  int32_t num_blocks() const { return config_.num_blocks; }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_sequences() const { return static_cast<int32_t>(seqs_.size()); }
  const DraftProposerConfig& config() const { return config_; }

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    std::vector<int32_t> computed;  // tokens whose K/V the blocks hold, in order
    int32_t prompt_len = 0;
    uint64_t last_used = 0;
  };
  // One request of a call being drafted.
  struct Work {
    size_t index = 0;  // into the call's requests and outputs
    Seq* seq = nullptr;
    int32_t n = 0;  // the request's tokens
    int32_t k = 0;  // drafts wanted
    bool done = false;
    std::vector<int32_t> context;  // the request's tokens, then the drafts so far
  };

  // How many drafts of up to k the request's sequence gets room for (0: none), its
  // blocks reserved; the sequence's computed tokens cut to the common prefix.
  int32_t prepare(const ProposalRequest& r, Seq& s, int32_t k);
  // Blocks for `s` to hold `tokens` tokens, taking back idle sequences' blocks when the
  // free list is short; false (nothing taken) when they do not fit.
  bool reserve(Seq& s, int32_t tokens);
  void trim(Seq& s, int32_t tokens);  // frees the blocks past what `tokens` need
  void drop(Seq& s);                  // frees all its blocks and forgets its tokens
  void catch_up(std::span<const ProposalRequest> requests, std::span<Proposal> out,
                std::vector<Work>& work);
  void decode(std::span<const ProposalRequest> requests, std::span<Proposal> out,
              std::vector<Work>& work);
  // Appends one sequence's run of tokens to a step.
  void add_run(ForwardBatch& b, const Seq& s, std::span<const int32_t> tokens) const;
  void pad_block_tables(ForwardBatch& b) const;
  // Chooses the next draft of `w` from the draft's logits row; marks it done when no
  // more are wanted.
  void pick(Work& w, const ProposalRequest& r, Proposal& out, const float* logits);

  std::shared_ptr<LanguageModel> model_;
  DraftProposerConfig config_;
  int32_t draft_vocab_ = 0;
  std::vector<int32_t> free_;
  std::unordered_map<int64_t, Seq> seqs_;
  uint64_t clock_ = 0;  // counts calls; Seq::last_used
  Sampler sampler_;
  std::vector<float> row_;  // a processed logits row
};

// Sets to -inf the logits outside the set a sampled config draws from (Sampler::choose's
// top-k, then top-p of that set by the weights exp((l - max) / temperature), then min-p),
// so that a draw at the config's temperature over the whole row is the config's draw.
// Ties keep the lower ids. Greedy configs are left alone.
void restrict_to_draw_set(float* logits, int32_t vocab, const GenerateConfig& config);

}  // namespace tachyon
