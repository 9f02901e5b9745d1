// The contract between the engine and a model: one step's batch in, logits out.
// The engine deals in integers (token ids, positions, block ids); the model owns the
// weights and the paged KV cache and runs the decoder over the batch.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/sampling.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/vision/image.h"

namespace tachyon {

// What a model reads once from a sequence's prompt and needs at every step of that
// sequence (LanguageModel::prompt_layout): where its special tokens put it. The default
// is a causal prompt with positions by index.
struct PromptLayout {
  // Tokens before the prompt's generation block (ChatGLM-6B: before <sop>). With
  // `bidirectional` they attend to one another in both directions, so the step that
  // computes the first of them computes them all (the scheduler never splits them).
  int32_t context_len = 0;
  bool bidirectional = false;
  // GLM's 2-D positions: the index of the prompt's mask token ([gMASK] / [MASK]), which
  // every token from context_len on takes as its first position; -1 without them.
  int32_t mask_position = -1;
  // Leading tokens that must be computed in one step.
  int32_t atomic_len() const { return bidirectional ? context_len : 0; }
  bool operator==(const PromptLayout&) const = default;
};

// A token of a step that the step launched just before it chose on the device, and
// the host has not seen yet (LanguageModel::launch).
struct DeferredToken {
  int32_t index = 0;  // into ForwardBatch::token_ids, which holds a placeholder there
  int32_t row = 0;    // the logits row of the previous launched step whose token it is
  bool operator==(const DeferredToken&) const = default;
};

// Embeddings given for a run of a step's token rows instead of the token embeddings
// (image features scattered into a prompt, as Hugging Face's inputs_embeds).
struct InjectedEmbeddings {
  int32_t row = 0;  // the first row of token_ids they replace
  // [n, embed_dim] f32 on the host (embed_dim: the hidden size, or the embedding width of
  // a model that projects its embeddings in): rows row .. row + n - 1, as the token
  // embedding lookup would give them after the model's embedding scale (they are not
  // scaled again), before learned position embeddings, the input projection and the
  // embedding norm.
  Tensor values;
};

// One step over several sequences. Each sequence contributes a contiguous run of
// tokens (a prefill chunk, or one token when decoding), sequence after sequence.
struct ForwardBatch {
  std::vector<int32_t> token_ids;  // [num_tokens]
  std::vector<int32_t> positions;  // [num_tokens] position of each token in its sequence

  // Per sequence; num_seqs = query_start.size() - 1.
  std::vector<int32_t> query_start;   // [num_seqs + 1] offsets into token_ids
  std::vector<int32_t> context_lens;  // [num_seqs] tokens in the cache after this step
                                      // (already cached + this step's)
  // [num_seqs, max_blocks_per_seq] physical block ids of each sequence's KV blocks in
  // order; entries past a sequence's last block are -1.
  // A token's K/V go to its cache index (context_len - q_len + i for the i-th of its
  // sequence's q_len tokens of the step), never to a slot derived from its position. So
  // a prefix of KV the sequence did not compute (shared blocks, a P-tuning prefix) is
  // just blocks at the head of its table, counted in context_lens; the positions of the
  // tokens after it are whatever the model should see (they may restart at 0). Causal
  // attention, sliding windows and ALiBi follow cache indices; rotary, learned position
  // embeddings and log-n scaling follow positions (a rotary scaling fixed at prefill
  // reads prompt_lens, else context_lens).
  std::vector<int32_t> block_tables;
  int32_t max_blocks_per_seq = 0;

  // Optional, [num_seqs] or empty: the length of each sequence's prompt (its first
  // prefill, counted from position 0). Rotary scalings that fix their frequencies at
  // prefill (Qwen-1's dynamic NTK) read it; when empty they use context_lens.
  std::vector<int32_t> prompt_lens;

  // [num_seqs] or empty: each sequence's prompt layout. Required (all entries) by models
  // whose positions or attention follow it (LanguageModel::prompt_layout); empty is the
  // default layout for every sequence.
  std::vector<PromptLayout> layouts;

  // Rows of token_ids whose logits the step returns, in this order (usually the last
  // token of each sequence; every prompt row for prompt logits).
  std::vector<int32_t> logits_rows;

  // Optional: how each logits row becomes a token (backend/sampling.h). Empty: every
  // row's logits go back (forward()). Read by forward_sample() only.
  SamplingBatch sampling;

  // Tokens taken from the previous launch()ed (or forward_sample()d) step's chosen ids
  // instead of token_ids (each index at most once; token_ids holds any valid id there).
  // A row whose token was not a real id (kTokenBadLogits, ...) gives id 0.
  std::vector<DeferredToken> deferred;

  // Optional: embeddings that replace the token embeddings of some rows (each row at
  // most once; the token_ids there are still valid ids, unused). Empty: none.
  std::vector<InjectedEmbeddings> embeddings;

  // Optional: rows of token_ids whose final hidden states the step returns in
  // ForwardOutput::hidden, in this order (draft heads read them). Empty: none.
  std::vector<int32_t> hidden_rows;

  // Optional, [num_seqs] or empty: each sequence's mask over its own tokens of the step
  // (a tree of speculative tokens verified at once), q_len x q_len row-major, or empty
  // for causal. mask[i * q_len + j] != 0: token i sees token j; only j <= i, and
  // mask[i * q_len + i] set. Every token sees all the tokens cached before the step.
  // A token's position is its place in its own branch (branches of equal depth share
  // positions); its K/V still go to its cache index, so the accepted branch's K/V are
  // where its tokens stood in the step (the engine moves or recomputes them).
  std::vector<std::vector<uint8_t>> tree_masks;

  // Optional, [num_seqs] or empty: each sequence's adapter (multi-LoRA); 0 is the base
  // model. Empty: the base model for every sequence.
  std::vector<int32_t> adapter_ids;

  int32_t num_seqs() const { return static_cast<int32_t>(query_start.size()) - 1; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

// What forward_sample() returns.
struct ForwardOutput {
  // [logits_rows.size()]: the token chosen on the device for each kDevice row, or
  // kTokenOnHost (the row's logits are in `logits`), kTokenBadLogits, kTokenNoneAllowed.
  std::vector<int32_t> tokens;
  // [logits_rows.size()] or empty (no row chosen on the device): for each token chosen
  // on the device, its log-probability in the distribution it was drawn from
  // (SamplingBatch: log-softmax of the adjusted logits over the row's temperature, 1 when
  // greedy); 0 for the other rows.
  std::vector<float> logprobs;
  // float32 logits on the CPU of the kHost rows only, in logits_rows order
  // [number of kHost rows, vocab_size] (every row when batch.sampling is empty).
  Tensor logits;
  // float32 on the CPU [hidden_rows.size(), D]: the final hidden states of the batch's
  // hidden_rows, what the LM head reads (after the final norm, and the output
  // projection of a model that has one: D is then its width; Hugging Face's
  // last_hidden_state). Empty when hidden_rows is.
  Tensor hidden;
};

// What a model offers the engine. The decoder implements it; tests may fake it.
// A LoRA adapter in the form a model's steps read (model/lora_slots.h); made by the
// model (Model::prepare_adapter), opaque to the engine.
struct PreparedAdapter;

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  virtual int32_t vocab_size() const = 0;
  // The longest sequence (prompt + generated) the model supports.
  virtual int32_t max_seq_len() const = 0;
  // The layout of a prompt, passed back with every step of its sequences
  // (ForwardBatch::layouts). Throws InvalidArgument for a prompt the model cannot take
  // (ChatGLM-6B: no <sop>, or neither [gMASK] nor [MASK]).
  virtual PromptLayout prompt_layout(std::span<const int32_t> prompt) const {
    (void)prompt;
    return {};
  }

  // Whether a block of K/V computed for one sequence serves another whose tokens up to
  // it are the same (the prefix cache): always; only when the prompts are as long
  // (rotary frequencies fixed at the prompt's length); never (frequencies that follow
  // the length seen so far, so that a block's K/V depends on when it was computed).
  enum class PrefixReuse { kAlways, kSamePromptLength, kNever };
  virtual PrefixReuse prefix_reuse() const { return PrefixReuse::kAlways; }

  // Multi-LoRA: how many adapters a step may use at once (0: the model was loaded
  // without room for adapters).
  virtual int32_t max_adapters() const { return 0; }
  // Registers adapter `id` (> 0, not registered) for steps' adapter_ids, and removes it
  // (no step in flight or to come may name it then). Between steps only.
  virtual void add_adapter(int32_t id, std::shared_ptr<const PreparedAdapter> adapter) {
    (void)adapter;
    raise<InvalidArgument>("add_adapter {}: this model has no room for LoRA adapters", id);
  }
  virtual void remove_adapter(int32_t id) { (void)id; }

  // Images (a model with a vision tower): the token that stands for an image's
  // embeddings in a prompt, and how many of them one image takes (-1 and 0 for a model
  // without one). A prompt's k-th image token takes row k % image_tokens() of the
  // embeddings of its image k / image_tokens() (ForwardBatch::embeddings).
  virtual int32_t image_token_id() const { return -1; }
  virtual int32_t image_tokens() const { return 0; }
  // Checks an image before it is accepted (any thread): InvalidArgument for pixel_values
  // the tower does not take, or for a model without a vision tower.
  virtual void check_image(const ImageInput& image) const {
    (void)image;
    raise<InvalidArgument>("this model has no vision tower: it takes no images");
  }
  // The image's embeddings [image_tokens(), embed_dim] f32 on the host (not changed
  // afterwards), computed on the model's device or taken from its cache. Between steps.
  virtual Tensor image_embeddings(const ImageInput& image) {
    check_image(image);
    return {};
  }

  // Bytes of KV cache one block of `block_size` tokens takes across all layers.
  virtual size_t kv_bytes_per_block(int32_t block_size) const = 0;
  // (Re)allocates the paged KV cache: num_blocks blocks of block_size tokens.
  virtual void init_kv_cache(int32_t num_blocks, int32_t block_size) = 0;
  // Whether grow_kv_cache works: the engine then reserves the cache in chunks, growing
  // it on demand up to its capacity.
  virtual bool can_grow_kv_cache() const { return false; }
  // Enlarges the cache to num_blocks blocks (at least as many as it has), keeping the
  // contents of blocks [0, old count); between steps only (nothing in flight).
  virtual void grow_kv_cache(int32_t num_blocks) {
    (void)num_blocks;
    raise<InvalidArgument>("grow_kv_cache: this model's KV cache cannot grow");
  }
  // Copies whole blocks (src -> dst) in every layer: copy-on-write for shared prefixes.
  virtual void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) = 0;
  // (Re)allocates swap space: host memory for num_blocks blocks of the cache's shape,
  // where preempted sequences are kept instead of recomputed (init_kv_cache first).
  // False, with nothing allocated, for a model that cannot swap.
  virtual bool init_kv_swap(int32_t num_blocks) {
    (void)num_blocks;
    return false;
  }
  // Copies whole blocks in every layer: out (cache block -> swap block), then in (swap
  // block -> cache block), ordered before the next forward pass.
  virtual void swap_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& out,
                              const std::vector<std::pair<int32_t, int32_t>>& in) {
    if (!out.empty() || !in.empty())
      raise<InvalidArgument>("swap_kv_blocks: this model has no swap space");
  }

  // Runs the decoder over the batch: writes this step's K/V into the cache blocks named
  // by the block tables and returns float32 logits [logits_rows.size(), vocab_size] on
  // the CPU. Throws InvalidArgument on an inconsistent batch.
  virtual Tensor forward(const ForwardBatch& batch) = 0;

  // Whether forward_sample() draws tokens on the model's device.
  virtual bool samples_on_device() const { return false; }
  // Steps queued ahead of their results. launch() queues forward_sample() of the batch
  // and may return before the device has done it; collect() waits for the oldest
  // launched step and returns its output. So the engine can queue step N + 1, whose
  // batch.deferred tokens are step N's chosen ids, before it has seen them, and the
  // device never waits for the host between steps. At most two steps are launched and
  // not collected; forward() and forward_sample() are not called in between. This
  // default runs the step inside launch() (nothing overlaps), resolving the deferred
  // tokens from the previous step's output.
  virtual void launch(const ForwardBatch& batch);
  virtual ForwardOutput collect();
  // Whether launch() computes the step itself before it returns (the default, and a
  // model on the CPU) rather than queueing it on a device: the engine then counts the
  // time of launch() as the forward pass, not as its own overhead.
  virtual bool launch_computes() const { return true; }
  // forward() that chooses the tokens of batch.sampling's kDevice rows where the model
  // runs and returns only their ids (plus the kHost rows' logits). This default, for
  // models that cannot, returns every row's logits (all rows kTokenOnHost).
  virtual ForwardOutput forward_sample(const ForwardBatch& batch) {
    if (!batch.hidden_rows.empty())
      raise<InvalidArgument>("forward_sample: this model returns no hidden states");
    ForwardOutput out;
    out.logits = forward(batch);
    out.tokens.assign(batch.logits_rows.size(), kTokenOnHost);
    return out;
  }

 private:
  // The default launch(): outputs not yet collected, and the last step's chosen ids.
  std::deque<ForwardOutput> launched_;
  std::vector<int32_t> last_tokens_;
};

}  // namespace tachyon
