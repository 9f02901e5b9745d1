// One step on one device: the LanguageModel the engine talks to. The runner checks a
// step's batch, stages its metadata on the device in one upload, owns the paged KV
// cache and its swap space, replays recorded graphs of decode steps, and queues steps
// with their device sampling ahead of their results; the Decoder it owns does the
// model's math on the staged inputs.
#pragma once

#include <compare>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/forward.h"
#include "model/lora_slots.h"
#include "model/rope.h"
#include "model/vision/image_encoder.h"
#include "model/weights.h"

namespace tachyon {

struct LoraAdapter;

// A loaded model: the engine contract plus what tools want to show about it.
class Model : public LanguageModel {
 public:
  virtual const ModelConfig& config() const = 0;
  virtual const ModelWeights& weights() const = 0;
  virtual Backend& backend() = 0;
  virtual size_t workspace_bytes(int32_t max_tokens) const = 0;
  // Multi-LoRA: the largest adapter rank the model takes (0: no room for adapters), and
  // an adapter in the form its steps read, for add_adapter(). Any thread. Throws
  // InvalidArgument for an adapter that does not fit (a rank past max_lora_rank(), a
  // module the model does not have).
  virtual int32_t max_lora_rank() const { return 0; }
  virtual std::shared_ptr<const PreparedAdapter> prepare_adapter(const LoraAdapter& adapter) const;
};

class ModelRunner final : public Model {
 public:
  ModelRunner(ModelConfig config, ModelWeights weights, std::unique_ptr<Backend> backend);

  int32_t vocab_size() const override { return static_cast<int32_t>(cfg_.vocab_size); }
  int32_t max_seq_len() const override { return static_cast<int32_t>(cfg_.max_seq_len); }
  PromptLayout prompt_layout(std::span<const int32_t> prompt) const override;
  PrefixReuse prefix_reuse() const override;
  size_t kv_bytes_per_block(int32_t block_size) const override;
  void init_kv_cache(int32_t num_blocks, int32_t block_size) override;
  // On the CPU only (a GPU's cache is reserved whole, and steps may be in flight there).
  bool can_grow_kv_cache() const override;
  void grow_kv_cache(int32_t num_blocks) override;
  void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override;
  bool init_kv_swap(int32_t num_blocks) override;
  void swap_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& out,
                      const std::vector<std::pair<int32_t, int32_t>>& in) override;
  Tensor forward(const ForwardBatch& batch) override;
  bool launch_computes() const override { return be_->device().is_cpu(); }
  bool samples_on_device() const override { return be_->supports_sampling(); }
  // launch() then collect(); no step may be launched and not collected.
  ForwardOutput forward_sample(const ForwardBatch& batch) override;
  // On a device backend launch() queues the step, its sampling and the copies of its
  // results, and returns; collect() waits for them (model_runner_sample.cc).
  void launch(const ForwardBatch& batch) override;
  ForwardOutput collect() override;

  const ModelConfig& config() const override { return cfg_; }
  const ModelWeights& weights() const override { return decoder_.weights(); }

  // Multi-LoRA (model_runner_lora.cc): room for adapters of rank up to max_rank, max_loras
  // of them resident on the device at once; before the KV cache is sized (the arena takes
  // device memory) and any step.
  void enable_lora(int32_t max_loras, int32_t max_rank);
  int32_t max_adapters() const override { return lora_ ? lora_->num_slots() : 0; }
  int32_t max_lora_rank() const override { return lora_ ? lora_max_rank_ : 0; }
  static constexpr int32_t kMaxGpuLoraRank = 64;
  std::shared_ptr<const PreparedAdapter> prepare_adapter(const LoraAdapter& adapter) const override;
  void add_adapter(int32_t id, std::shared_ptr<const PreparedAdapter> adapter) override;
  void remove_adapter(int32_t id) override;
  // Adapters copied into device slots so far (for tests and statistics).
  int64_t lora_swaps() const { return lora_ ? lora_->swaps() : 0; }
  Backend& backend() override { return *be_; }

  // Images (model_runner_vision.cc): the vision tower of a model whose config has one
  // (ModelConfig::vision), on this runner's backend, from its weights in host memory.
  void attach_vision(VisionWeights weights);
  int32_t image_token_id() const override;
  int32_t image_tokens() const override;
  void check_image(const ImageInput& image) const override;
  Tensor image_embeddings(const ImageInput& image) override;
  // The image side (null without a vision tower), for tests and statistics.
  ImageEncoder* image_encoder() { return images_.get(); }
  // Device bytes the activations of a step of max_tokens tokens may take (an upper
  // estimate, for sizing the KV cache from the memory left).
  size_t workspace_bytes(int32_t max_tokens) const override;

  // Pure decode steps (one new token per sequence, logits for each) on a backend that
  // records graphs run as a replayed graph per (batch bucket, context bucket): the
  // batch is padded to the bucket and its metadata refreshed in place. On by default;
  // TACHYON_GRAPHS=0 in the environment turns it off.
  // Setting it drops the graphs recorded so far (backend settings may have changed).
  void set_step_graphs(bool on) {
    graphs_on_ = on;
    graphs_.clear();
  }
  bool step_graphs() const { return graphs_on_; }
  // Eager steps of at least this many tokens (kRopeGatherRows) take their rotary rows
  // from a device table (rope_rows_) instead of uploading them; 0 turns that off (tests
  // compare the two forms).
  void set_rope_gather_rows(int64_t rows) { rope_gather_rows_ = rows; }
  static constexpr int64_t kRopeGatherRows = 256;
  // Steps whose rotary rows were gathered on the device so far (for tests).
  int64_t rope_gathers() const { return rope_gathers_; }
  // Steps that ran as a graph replay, and graphs recorded, so far.
  int64_t graph_replays() const { return graph_replays_; }
  int64_t graph_records() const { return graph_records_; }

 private:
  void validate(const ForwardBatch& b) const;
  // ForwardBatch::embeddings: f32 [n, embed_dim] host tensors on rows of the step, no
  // row twice.
  void validate_embeddings(const ForwardBatch& b) const;
  // ForwardBatch::tree_masks: q_len x q_len lower-triangular masks with a set diagonal,
  // never beside a bidirectional prefix (model_runner_layout.cc, as the two below).
  void validate_tree_masks(const ForwardBatch& b) const;
  // in_.meta.tree_mask / tree_mask_start from b.tree_masks (absent when it is empty).
  void stage_tree_masks(const ForwardBatch& b);
  // The decoder's hidden states of the step of `b` just computed, f32 on the host (empty
  // when b asks for none).
  Tensor host_hidden(const ForwardBatch& b);
  // (model_runner_layout.cc, with rotary_positions and stage_prefix_lens)
  void validate_layouts(const ForwardBatch& b) const;
  // GLM's 2-D rotary positions of the step's tokens: h_pos_ and h_block_.
  void rotary_positions(const ForwardBatch& b);
  // in_.meta.prefix_lens: set when some query of the step lies inside a bidirectional
  // context (only a prompt's first step can have one), else absent.
  void stage_prefix_lens(const ForwardBatch& b);
  // The step's attention metadata, slots and rotary tables. Tokens from live_tokens on
  // are padding: their K/V are not written.
  // With gather_rope, a long enough step of a rotary model whose rows depend on the
  // position alone stages its positions, and the decoder gathers the rows (the table is
  // grown here): a prefill of T tokens would otherwise copy T x rot floats three times on
  // the host and upload them before its first kernel.
  void stage_metadata(const ForwardBatch& b, int64_t live_tokens, bool gather_rope = true);
  // rope_rows_ covering positions [0, n).
  void ensure_rope_rows(int64_t n);
  // Token ids, learned positions and the logits rows (in_.logits_rows, left empty when
  // they are the step's rows in order: the final hidden states then need no gather).
  void stage_inputs(const ForwardBatch& b);
  // The step's adapters: slots assigned (swapping adapters in), each token's slot staged
  // into in_.lora; in_.lora empty when every sequence runs the base model.
  void stage_lora(const ForwardBatch& b);
  // The deferred tokens into the uploaded ids (after upload_staged()).
  void take_deferred();
  // A step's metadata goes to the device in one copy: stage() appends a piece of 4-byte
  // elements to h_staged_ (each at a 256-byte boundary) and names the tensor that will
  // view it; upload_staged() copies them all into staged_ and sets those tensors.
  void stage(const void* data, Shape shape, DType dtype, Tensor* out);
  void upload_staged();
  // The decoder's step on the uploaded inputs into logits [R, V] f32.
  void compute(Tensor& logits) { decoder_.compute(in_, kv_, logits); }
  bool graph_eligible(const ForwardBatch& b) const;
  // The most tokens a step recorded as a graph has (its batch bucket times its tokens
  // per sequence), and the most tokens per sequence (model_runner_graph.cc).
  static constexpr int32_t kMaxGraphBatch = 512;
  static constexpr int32_t kMaxGraphQueries = 16;
  Tensor forward_graph(const ForwardBatch& b);
  std::vector<const void*> buffer_addresses() const;
  // The step's f32 logits [logits_rows, vocab] on the backend's device.
  Tensor device_logits(const ForwardBatch& b);

  std::unique_ptr<Backend> be_;
  Decoder decoder_;
  const ModelConfig& cfg_;  // the decoder's
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<LoraSlots> lora_;
  std::unique_ptr<ImageEncoder> images_;
  int32_t lora_max_rank_ = 0;  // adapters of a larger rank are refused (the arena may hold more)
  std::vector<int32_t> h_lora_slots_, h_lora_rows_;
  bool all_sliding_ = false;  // every layer has the sliding window

  // One cache per layer, sized to its KV heads (empty for a layer without attention).
  std::vector<LayerKvCache> kv_;
  std::vector<LayerKvCache> swap_;  // swap space, the cache's block shape (Backend::alloc_swap)
  int32_t block_size_ = 0;
  int32_t num_blocks_ = 0;

  // Host-side staging for the step's metadata (reused).
  std::vector<int32_t> h_slots_, h_seq_len_, h_pos_, h_block_, h_prefix_;
  std::vector<float> h_cos_sin_;
  std::vector<float> h_logn_;           // per-token query scale (logn_scaling_len)
  std::vector<int32_t> h_inject_rows_;  // ForwardBatch::embeddings, gathered
  std::vector<uint32_t> h_tree_mask_;   // ForwardBatch::tree_masks, packed
  std::vector<int32_t> h_tree_start_;
  std::vector<float> h_inject_values_;
  // Device metadata, all in staged_ (pieces of h_staged_, see stage()).
  std::vector<int32_t> h_staged_;
  struct StagedPiece {
    int64_t offset;  // in 4-byte words
    Shape shape;
    DType dtype;
    Tensor* out;
  };
  std::vector<StagedPiece> pieces_;
  StepBuffer staged_;
  // The step's inputs for the decoder (pieces of staged_, and rope_rows_).
  StepInputs in_;
  // The rotary rows of positions [0, rows) on the device ([rows, rot] f32), gathered
  // from by steps of at least rope_gather_rows_ tokens.
  Tensor rope_rows_;
  int64_t rope_gather_rows_ = kRopeGatherRows;
  int64_t rope_gathers_ = 0;

  // Step graphs (model_runner_graph.cc).
  struct StepGraph {
    std::unique_ptr<DeviceGraph> graph;
    std::vector<const void*> addresses;  // the buffers it was recorded on
  };
  struct GraphKey {
    int32_t batch, context, queries;  // buckets, and tokens per sequence
    bool tree, adapters;              // with tree masks; with LoRA adapters
    auto operator<=>(const GraphKey&) const = default;
  };
  std::map<GraphKey, StepGraph> graphs_;
  bool graphs_on_ = true;
  ForwardBatch padded_;
  StepBuffer graph_logits_;
  int64_t graph_replays_ = 0, graph_records_ = 0;
  // Device sampling and steps in flight (model_runner_sample.cc).
  StepBuffer sample_ids_;
  // A launched step: its output once the fence is passed (ids and the host rows'
  // logits copied into host buffers), or ready at launch.
  struct Launched {
    uint64_t fence = 0;
    int64_t rows = 0;
    Tensor ids;     // [2 * rows] i32, host: the ids, then their log-probs (f32 bits)
    Tensor logits;  // [host rows, V] f32, host
    Tensor hidden;  // [hidden rows, D] host, the activation dtype (f32 in collect())
    bool ready = false;
    ForwardOutput out;  // when ready
  };
  std::deque<Launched> launched_;
  // The ids the last launched step chose on the device [rows] (what the next step's
  // deferred tokens read), or empty when it chose none.
  Tensor last_ids_;
  // Host buffers for results in flight (alloc_host), reused once nothing else holds them.
  std::vector<Tensor> host_pool_;
  Tensor host_buffer(int64_t elems, DType dtype);
  Tensor deferred_t_;  // the step's deferred pairs [n, 2] (a staged piece)
};

}  // namespace tachyon
