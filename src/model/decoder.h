// The unified decoder's math: one implementation for every architecture, driven by
// ModelConfig flags and built from backend ops only. It turns a step's inputs, already
// on the device (StepInputs, staged by ModelRunner), into the logits of the rows asked
// for, writing the step's K/V into the paged caches it is handed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "model/config.h"
#include "model/weights.h"

namespace tachyon {
struct LoraAdapter;
}

namespace tachyon {

// A reusable device buffer, grown to the largest step seen.
struct StepBuffer {
  Tensor storage;
  // A [rows, cols] view of the storage (grown when needed), in the backend's
  // activation dtype unless given.
  Tensor view(Backend& be, int64_t rows, int64_t cols);
  Tensor view(Backend& be, int64_t rows, int64_t cols, DType dtype);
};

// One step's inputs on the device (T tokens, R logits rows).
struct StepInputs {
  Tensor ids;        // [T] i32 token ids
  Tensor positions;  // [T] i32, for learned position embeddings only
  Tensor slots;      // [T] i32 the cache slot of each token's K/V; -1: not written
  AttentionMeta meta;
  // Rotary models: the step's rows [T, rot] f32; or, given rope_rows (the rows of
  // positions [0, n), [n, rot] f32), gathered from them at rope_positions ([T] i32).
  Tensor cos_sin;
  Tensor rope_rows, rope_positions;
  // [R] i32: the rows whose logits the step wants, in order; empty when they are the
  // step's rows in order (the final hidden states then need no gather).
  Tensor logits_rows;
  // [T] f32 per-token query scale (logn_scaling_len), or empty when every scale is 1.
  Tensor logn;
  // Embeddings given for some rows: [n] i32 rows and [n, embed_dim] f32 values that
  // replace those rows' token embeddings (ForwardBatch::embeddings); empty: none.
  Tensor inject_rows, inject_values;
  // [H] i32: the rows whose final hidden states the step keeps (Decoder::hidden());
  // empty: none.
  Tensor hidden_rows;
  // The step's adapters (multi-LoRA); lora.row_slots empty: none.
  LoraStep lora;
};

// The rows of a LoRA arena (backend/ops.h LoraStep): every adaptable product's place,
// for adapters of rank up to max_rank.
struct LoraArenaShape {
  int32_t max_rank = 0;
  int64_t row_elems = 0;     // elements of one slot's row
  int32_t rank_entries = 0;  // rank entries of one slot (one per product part)
};

// A layer of a plain pre-norm decoder (the usual case; layer() has the others:
// parallel residual, post-norm, sandwich norms, residual from the norm):
//
//   qkv = rotary(qkv(attn_norm(x)))            (K/V written to the cache on the way)
//   x  += o(attention(qkv, cache))
//   x  += down(act(gate(mlp_norm(x))) * up(mlp_norm(x)))   (or the MoE experts)
//
// and logits = lm_head(final_norm(x)) at the rows asked for. Each line is one of the
// backend's layer-level products (attention_input, linear_residual, mlp_input), which
// fuse inside them what the backend's kernels can.
class Decoder {
 public:
  // Prepares the weights for the backend's kernels (uploaded, stacked, the input norms
  // offered to the backend to fold).
  Decoder(ModelConfig config, ModelWeights weights, Backend& backend);
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }

  // The step on `in`: T = in.ids' tokens, logits [R, V] f32 (device work only). Writes
  // the step's K/V into kv (one cache per layer).
  void compute(const StepInputs& in, std::span<LayerKvCache> kv, Tensor& logits);

  // The final hidden states of the last step's in.hidden_rows, [H, D] in the activation
  // dtype on the device (D: what the LM head reads); valid until the next step. Empty
  // when that step asked for none.
  const Tensor& hidden() const { return hidden_; }

  // Multi-LoRA (decoder_lora.cc). Gives every dense layer's q/k/v, o, gate/up (or up)
  // and down products a place in an arena row for adapters of rank up to max_rank (their
  // LinearWeights::lora); once, before any step.
  LoraArenaShape plan_lora(int32_t max_rank);
  const LoraArenaShape& lora_shape() const { return lora_shape_; }
  // An adapter's arena row: row [row_elems] f32 and ranks [rank_entries], zero where it
  // leaves a product alone; the A of a product that reads a folded norm carries the
  // norm's scale. Throws InvalidArgument for a module no product of the decoder has, a
  // product part adapted twice, or a rank past the arena's.
  void pack_lora(const LoraAdapter& adapter, std::span<float> row, std::span<int32_t> ranks) const;

  // Device bytes the activations of a step of max_tokens tokens may take, with the f32
  // logits of every row (an upper estimate, for sizing the KV cache).
  size_t workspace_bytes(int32_t max_tokens) const;
  // The addresses of the activation buffers compute() works in (a recorded step reads
  // them), in a fixed order.
  void buffer_addresses(std::vector<const void*>& out) const;

 private:
  // One layer over the residual stream x [T, D], in the model's residual form.
  void layer(int l, Tensor& x);
  // The attention of layer l over norm(x) (x itself without a norm): [T, q_cols], the
  // input of the o projection. K/V go to the layer's cache.
  Tensor attention(int l, const Tensor& x, const NormParams* norm);
  // The MLP (or MoE) of layer l over norm(x), added into residual.
  void mlp_residual(int l, const Tensor& x, const NormParams* norm, Tensor& residual);
  // The same into out [T, D] (out = the MLP's output).
  void mlp(int l, const Tensor& x, const NormParams* norm, Tensor& out);
  // The MoE block of layer l over h (already normed) into out.
  void moe(int l, const Tensor& h, Tensor& out);
  // out = x · wᵀ + b, plus the step's adapters of w.
  void product(const Tensor& x, const LinearWeights& w, Tensor& out);
  // norm(x) into buf (x untouched).
  Tensor normed(const Tensor& x, const NormParams& norm, StepBuffer& buf);

  // Every weight in the form the backend's kernels read (on a GPU: converted and
  // uploaded once, q/k/v and gate/up stacked; on the CPU: the same tensors), and each
  // layer's AttentionInput / MlpInput. (decoder_weights.cc, as prepare_input_norms)
  static void prepare_weights(ModelWeights& w, Backend& be);
  void build_layer_inputs();
  // The norms that only the layer-level products read, offered to the backend to fold
  // into their weights.
  void prepare_input_norms();
  // Offers a norm to the backend to fold into its readers; when it does, `scale` gets
  // the scale they now carry (weight_offset + weight).
  void fold_norm(NormParams& norm, std::span<Tensor* const> readers, std::vector<float>& scale);

  ModelConfig cfg_;
  ModelWeights w_;
  Backend& be_;
  std::vector<QkvLayout> layouts_;  // per layer
  QkvLayout widest_;                // the most heads and KV heads of any layer
  int64_t widest_inter_ = 0;
  std::vector<AttentionParams> attn_params_;
  std::vector<AttentionInput> attn_in_;
  std::vector<MlpInput> mlp_in_;
  std::vector<MlpInput> shared_in_;  // MoE layers' shared expert
  // Per layer: the scales of the attention's and the MLP's input norms where the backend
  // folded them into the products' weights (empty where not).
  struct FoldedScales {
    std::vector<float> attn, mlp;
  };
  std::vector<FoldedScales> folded_scales_;
  LoraArenaShape lora_shape_;

  // The step compute() runs: its inputs, caches and rotary rows (the staged or the
  // gathered ones).
  const StepInputs* step_ = nullptr;
  const LoraStep* lora_ = nullptr;
  std::span<LayerKvCache> kv_;
  Tensor cos_sin_;

  // Activations.
  StepBuffer residual_, h_, h2_, embed_, qkv_, attn_, o_, mlp_, act_, shared_, router_, moe_ids_,
      moe_w_, shared_logit_, final_, final_proj_, rope_gathered_, hidden_buf_, hidden_proj_;
  Tensor hidden_;  // the last step's hidden states (a view of hidden_buf_ or hidden_proj_)
};

}  // namespace tachyon
