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
};

// A layer of a plain pre-norm decoder (the usual case; compute() has the others:
// parallel residual, post-norm, sandwich norms, residual from the norm):
//
//   h  = attn_norm(x)                          (or folded into the qkv product)
//   x += o(attention(rotary(qkv(h)), cache))   (K/V written to the cache on the way)
//   h  = mlp_norm(x)                           (or folded into the gate/up product)
//   x += down(act(gate(h)) * up(h))            (or the MoE experts)
//
// and logits = lm_head(final_norm(x)) at the rows asked for. Where the backend can, the
// adds into x happen inside the o and down products, and a norm rides on the product
// that reads it (RowRms, from the squares the add before kept).
class Decoder {
 public:
  // Prepares the weights for the backend's kernels (uploaded, fused, norms folded).
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

  // Device bytes the activations of a step of max_tokens tokens may take, with the f32
  // logits of every row (an upper estimate, for sizing the KV cache).
  size_t workspace_bytes(int32_t max_tokens) const;
  // The addresses of the activation buffers compute() works in (a recorded step reads
  // them), in a fixed order.
  void buffer_addresses(std::vector<const void*>& out) const;

 private:
  // The blocks write their output projection to `out`; given `add_into` (the residual
  // stream), they add it there instead where the backend folds the add into the product
  // (Backend::linear_add), and return true when they did (`out` is then untouched).
  // Given `rms` (the layer's norm, folded: fold_norms), `h` is the residual stream
  // itself: the block's first product normalises its rows (RowRms) where the backend
  // can, or the block runs the weightless norm into h_ first. With the norms folded, the
  // products that add into the residual stream ask the backend to keep its rows' squares
  // (squares_) for the RowRms product that reads it next.
  bool attention_block(int layer, const Tensor& h, Tensor& out, Tensor* add_into = nullptr,
                       const NormParams* rms = nullptr);
  bool mlp_block(int layer, const Tensor& h, Tensor& out, Tensor* add_into = nullptr,
                 const NormParams* rms = nullptr);
  // norm(in) into h_ (in: the residual stream, untouched); the blocks' weightless norm pass.
  Tensor normed(const Tensor& in, const NormParams& norm);
  // The MLP's down projection of the activation a [T, inter_size] (as the blocks above).
  bool down_block(int layer, const Tensor& a, Tensor& out, Tensor* add_into);
  // Every weight in the form the backend's kernels read (on a GPU: converted and
  // uploaded once, q/k/v and gate/up stacked; on the CPU: the same tensors).
  // (decoder_weights.cc, as fold_norms)
  static void prepare_weights(ModelWeights& w, Backend& be);
  // The pre-attention and pre-MLP norms of a plain pre-norm decoder moved into the qkv
  // and gate/up weights (Backend::fold_norm), where the backend folds every layer's:
  // the norms keep only their normalisation (a weight of ones).
  void fold_norms();

  ModelConfig cfg_;
  ModelWeights w_;
  Backend& be_;
  QkvLayout layout_;
  std::vector<AttentionParams> attn_params_;
  bool norms_folded_ = false;  // fold_norms() did
  // What the last linear_add into the residual stream kept of its rows (reset wherever
  // the stream is written otherwise).
  RowSquares squares_;
  RowSquares* squares_out() { return norms_folded_ ? &squares_ : nullptr; }

  // The step compute() runs: its inputs, caches and rotary rows (the staged or the
  // gathered ones).
  const StepInputs* step_ = nullptr;
  std::span<LayerKvCache> kv_;
  Tensor cos_sin_;

  // Activations.
  StepBuffer residual_, h_, h2_, embed_, qkv_, attn_, o_, mlp_, gate_up_, act_, shared_, router_,
      moe_ids_, moe_w_, shared_logit_, final_, final_proj_, rope_gathered_, hidden_buf_,
      hidden_proj_;
  Tensor hidden_;  // the last step's hidden states (a view of hidden_buf_ or hidden_proj_)
};

}  // namespace tachyon
