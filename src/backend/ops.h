// The backend contract: the operations the unified decoder is built from. A backend
// (backend/cpu, later backend/cuda) implements every method for tensors on its device;
// the decoder never reads or writes activation memory itself, it only calls these.
//
// Conventions for every op below:
// - Activations are row-major and contiguous: [rows, cols], in the backend's
//   activation_dtype() (f32 on the CPU; bf16 or f16 on a GPU, where kernels accumulate
//   in f32). "T" is the number of tokens in the step, "D" the hidden size. Logits and
//   other outputs the host reads (router weights) may be asked for in f32.
// - Weights are in the Hugging Face Linear layout [out_features, in_features], in the
//   form prepare_weight() gives: the checkpoint dtype on the CPU (kernels convert on
//   the fly), the backend's compute dtype on a GPU; linear() weights in the form of
//   prepare_linear_weight() (on the CPU's AVX-512 path: packed panels, see
//   backend/cpu/gemm.h). Vectors (norm weights, biases, ALiBi slopes) are f32.
// - Integer metadata (token ids, positions, slots, block tables) is i32 on the device.
// - An empty Tensor (`!t`) means "absent" for optional arguments.
// - Shapes are validated with TACHYON_CHECK (a mismatch is a bug in the caller).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/sampling.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tachyon {

enum class Activation : uint8_t {
  kIdentity,
  kSilu,      // x * sigmoid(x)
  kGelu,      // exact (erf) GELU
  kGeluTanh,  // tanh approximation (gelu_new, gelu_pytorch_tanh, gelu_fast)
  kRelu,
  kQuickGelu,  // x * sigmoid(1.702 x)
};

enum class NormType : uint8_t { kRMSNorm, kLayerNorm };

enum class RotaryStyle : uint8_t {
  kNone,
  kHalf,         // GPT-NeoX / Llama: pairs (i, i + rot/2), "rotate_half"
  kInterleaved,  // GPT-J / GLM: pairs (2i, 2i + 1), "rotate_every_two"
  // rotate_half within each half of the rotated dims: pairs (i, i + rot/4) and
  // (rot/2 + i, rot/2 + i + rot/4); rot a multiple of 4. ChatGLM-6B's 2-D positions turn
  // the two halves by two different positions (the cos/sin table says which).
  kHalf2D,
};

// Where q, k and v live inside a fused activation row: [q (H*hd) | k (KV*hd) | v (KV*hd)].
struct QkvLayout {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t q_cols() const { return int64_t{num_heads} * head_dim; }
  int64_t kv_cols() const { return int64_t{num_kv_heads} * head_dim; }
  int64_t row_cols() const { return q_cols() + 2 * kv_cols(); }
};

// One norm's parameters: weight [D] f32, optional bias [D] f32 (LayerNorm).
struct NormParams {
  NormType type = NormType::kRMSNorm;
  Tensor weight;
  Tensor bias;
  float eps = 1e-5f;
  float weight_offset = 0.f;  // the scale is (weight_offset + weight): Gemma uses 1
  // The scale lives in the weights of the products that read the norm's output
  // (Backend::prepare_input_norm moved it there): weight is ones, the norm only
  // normalises.
  bool folded = false;
};

// Low-rank adapters (multi-LoRA). The adapters resident on the device live in one
// arena [slots, slot_elems] in the activation dtype, a row per slot; every adapted
// product has a place in each row (the same in every row): out += B · (A · x), with
// A [parts * R, K] at a_offset and B [N, R] at b_offset (elements from the row's start,
// row-major; R the arena's rank capacity, the adapter's scaling folded into B). The
// product's output columns fall into `parts` consecutive ranges (q, k and v of a stacked
// q/k/v product; gate and up), range p ending at part_end[p] and reading rows
// [p R, p R + r) of A and columns [0, r) of B, r = ranks[slot, rank_index + p] (0: the
// adapter leaves that part alone; rows and columns past r are zero).
struct LoraTarget {
  int64_t a_offset = -1;  // -1: no adapter can target the product
  int64_t b_offset = 0;
  int64_t n = 0, k = 0;
  int32_t parts = 1;
  int32_t rank_index = 0;
  int64_t part_end[3] = {0, 0, 0};
  explicit operator bool() const { return a_offset >= 0; }
};

// A step's adapters: which slot each token's row uses, and the arena. The runner writes
// the arena, ranks and row_slots before the step's first kernel and never from a kernel of
// the step, so a backend's kernels may read them before waiting for the kernels before.
struct LoraStep {
  Tensor arena;          // [slots, slot_elems] activation dtype
  Tensor ranks;          // [slots, rank_entries] i32: each slot's rank per product part
  Tensor row_slots;      // [T] i32: the slot of each token's adapter; -1: the base model
  int32_t max_rank = 0;  // R, the arena's rank capacity
};

// The checks every backend's lora() makes (a failure is a bug in the caller).
inline void check_lora(const Tensor& x, const LoraStep& step, const LoraTarget& t,
                       const Tensor& out, int64_t col_offset) {
  TACHYON_CHECK(t && x.ndim() == 2 && out.ndim() == 2 && step.arena.ndim() == 2 &&
                    step.ranks.ndim() == 2 && step.row_slots.ndim() == 1,
                "lora: x {} out {} arena {} ranks {} row_slots {}", x.str(), out.str(),
                step.arena.str(), step.ranks.str(), step.row_slots.str());
  TACHYON_CHECK(x.dtype() == step.arena.dtype() && out.dtype() == x.dtype() &&
                    step.ranks.dtype() == DType::kI32 && step.row_slots.dtype() == DType::kI32,
                "lora: x {} out {} arena {} ranks {} row_slots {}", x.str(), out.str(),
                step.arena.str(), step.ranks.str(), step.row_slots.str());
  TACHYON_CHECK(x.dim(1) == t.k && out.dim(0) == x.dim(0) && col_offset >= 0 &&
                    out.dim(1) >= col_offset + t.n && step.row_slots.dim(0) == x.dim(0) &&
                    step.ranks.dim(0) == step.arena.dim(0),
                "lora: x {} out {} at {} for a product [{}, {}], row_slots {}", x.str(), out.str(),
                col_offset, t.n, t.k, step.row_slots.str());
  TACHYON_CHECK(t.parts >= 1 && t.parts <= 3 && t.part_end[t.parts - 1] == t.n &&
                    t.rank_index >= 0 && t.rank_index + t.parts <= step.ranks.dim(1) &&
                    step.max_rank > 0,
                "lora: {} parts ending at {} of {}, rank entries {} of {}", t.parts,
                t.part_end[t.parts - 1], t.n, t.rank_index, step.ranks.dim(1));
  for (int p = 1; p < t.parts; ++p)
    TACHYON_CHECK(t.part_end[p] > t.part_end[p - 1], "lora: part ends not increasing");
  const int64_t R = step.max_rank;
  TACHYON_CHECK(t.a_offset >= 0 && t.b_offset >= 0 &&
                    t.a_offset + t.parts * R * t.k <= step.arena.dim(1) &&
                    t.b_offset + t.n * R <= step.arena.dim(1),
                "lora: A at {} and B at {} past an arena row of {}", t.a_offset, t.b_offset,
                step.arena.dim(1));
}

// A linear layer's parameters in the form the backend's kernels read: w [N, K]
// (Backend::prepare_linear_weight), b [N] f32, optional; and where the product's
// adapters lie in the LoRA arena (none by default).
struct LinearWeights {
  Tensor w;
  Tensor b;
  LoraTarget lora;
  explicit operator bool() const { return static_cast<bool>(w); }
};

// How one layer's attention turns its input rows into q, k and v: the products (either
// the stacked one, [row_cols, K], or the three parts), then in this order the clamp,
// the per-head norms, the per-query scale and the rotary.
struct AttentionInput {
  QkvLayout layout;
  LinearWeights qkv;
  LinearWeights q, k, v;
  float clip = 0.f;           // > 0: q, k and v clamped to [-clip, clip]
  NormParams q_norm, k_norm;  // per-head norms over head_dim (Qwen3), when q_norm.weight
  RotaryStyle rotary = RotaryStyle::kNone;
};

// How one layer's MLP turns its input rows into the down projection's input: a gated
// MLP gives act(gate) * up (gate_up stacked [2I, K] with the gate rows first, or the two
// parts), an ungated one act(up).
struct MlpInput {
  bool gated = true;
  Activation act = Activation::kSilu;
  LinearWeights gate_up;
  LinearWeights gate, up;
};

// Per-step sequence metadata for the paged KV cache, all i32 device tensors.
// Cache slot s of a sequence holds its s-th cached token (its cache index, which need
// not be its position); the physical slot is
// block_tables[seq, s / block_size] * block_size + s % block_size.
struct AttentionMeta {
  Tensor query_start;   // [S + 1] offsets of each sequence's tokens in the step
  Tensor context_lens;  // [S] cached tokens after this step (earlier + this step's)
  Tensor block_tables;  // [S, max_blocks_per_seq]
  int32_t num_seqs = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t max_query_len = 0;  // host-side hints for work partitioning
  int32_t max_context_len = 0;
  // Optional host copies of query_start and context_lens (valid during the call), for
  // kernels that partition work per sequence on the host.
  const std::vector<int32_t>* host_query_start = nullptr;
  const std::vector<int32_t>* host_context_lens = nullptr;
  // Optional [S] i32: each sequence's bidirectional prefix (a
  // prefix-LM prompt, ChatGLM-6B's context). A query at cache index i then sees keys
  // [0, max(i, prefix_len - 1)]; every prefix key is in the cache (prefix_len <=
  // context_len). Absent (the usual case, and whenever no query of the step lies inside
  // a prefix): causal. Not combined with a sliding window.
  Tensor prefix_lens;
  // Optional: masks over each sequence's own step tokens (a tree of speculative tokens
  // verified in one step). tree_mask_start [S] i32: the word of tree_mask where
  // sequence s's mask starts, or -1 (causal); tree_mask i32 words of bits: bit
  // i * q_len + j of a sequence's mask (bit b in word b / 32, bit b % 32) set when its
  // step token i sees its step token j (only j <= i, and i sees itself). Every query
  // still sees every key cached before the step. Absent: causal. Not combined with
  // prefix_lens.
  Tensor tree_mask;
  Tensor tree_mask_start;
};

struct AttentionParams {
  float scale = 1.f;           // multiplies q.k
  float softcap = 0.f;         // > 0: score = softcap * tanh(score / softcap)
  int32_t sliding_window = 0;  // > 0: query at cache index i sees keys j > i - window
  // ALiBi: [num_heads] f32 slopes; score += alibi_scale * slope * key_index (the
  // per-row constant -slope * query_index cancels in the softmax). Added after scale
  // and softcap.
  Tensor alibi_slopes;
  float alibi_scale = 1.f;
  // Falcon's quirk: slope * key_index is rounded to bfloat16 before alibi_scale.
  bool alibi_bias_bf16 = false;
};

// The paged KV cache of one layer: K and V each [num_blocks, num_kv_heads, block_size,
// row] in the backend's kv_dtype() (kv_cache_shape): a row is a token's head_dim
// values; in int8 (i8) they are followed by the 4 bytes of their float scale (x =
// q * scale, scale = max|x| / 127 over the row), so a block carries its scales.
struct LayerKvCache {
  Tensor k;
  Tensor v;
  int32_t num_blocks() const { return k ? static_cast<int32_t>(k.dim(0)) : 0; }
  int32_t block_size() const { return k ? static_cast<int32_t>(k.dim(2)) : 0; }
};

// Bytes a cache row holds beside its head_dim values: the int8 row's float scale.
inline int64_t kv_row_extra(DType kv_dtype) {
  return kv_dtype == DType::kI8 ? 4 : 0;
}
// The shape of a layer's K (or V) cache of num_blocks blocks in kv_dtype.
inline Shape kv_cache_shape(DType kv_dtype, int64_t num_blocks, int64_t kv_heads,
                            int64_t block_size, int64_t head_dim) {
  return {num_blocks, kv_heads, block_size, head_dim + kv_row_extra(kv_dtype)};
}

// One MoE expert's weights: a gated MLP. Either gate_up [2I, D] (gate rows first) or
// gate [I, D] + up [I, D]; down [D, I].
struct MoeExpertWeights {
  Tensor gate_up;
  Tensor gate;
  Tensor up;
  Tensor down;
};

// Device work recorded once and queued again as one unit (a CUDA graph): the same
// kernels on the same buffers, so the caller refreshes the inputs in place between
// replays.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Queues the recorded work. Returns false (queuing nothing) when memory the backend
  // owns and the work used has moved since recording: the caller records again.
  virtual bool replay() = 0;
};

// The checks copy_blocks_between() makes: `from` and `to` share the block shape and
// dtype, every pair names blocks inside them. Returns the bytes of one block.
inline int64_t check_block_pairs(const Tensor& from, const Tensor& to,
                                 const std::vector<std::pair<int32_t, int32_t>>& pairs) {
  if (!from || !to || from.ndim() < 1 || from.ndim() != to.ndim() || from.dtype() != to.dtype())
    raise<InvalidArgument>("copy_blocks_between: {} and {} differ", from.str(), to.str());
  for (int64_t d = 1; d < from.ndim(); ++d)
    if (from.dim(d) != to.dim(d))
      raise<InvalidArgument>("copy_blocks_between: blocks of {} and {} differ", from.str(),
                             to.str());
  const int64_t nf = from.dim(0), nt = to.dim(0);
  for (const auto& [src, dst] : pairs)
    if (src < 0 || src >= nf || dst < 0 || dst >= nt)
      raise<InvalidArgument>("copy_blocks_between: block pair ({}, {}) out of [0, {}) x [0, {})",
                             src, dst, nf, nt);
  return nf > 0 ? static_cast<int64_t>(from.nbytes()) / nf : 0;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;

  // ---- dtypes, weights and the device ----------------------------------------------
  // The dtype of activations between ops and of the paged KV cache.
  virtual DType activation_dtype() const { return DType::kF32; }
  virtual DType kv_dtype() const { return DType::kF32; }
  // A weight in the form this backend's kernels read, on its device: matrices (2-d)
  // in the backend's weight dtype, vectors (norm weights, biases) in f32. The CPU
  // returns `host` itself, so a view of a mapped checkpoint stays one.
  virtual Tensor prepare_weight(const Tensor& host) { return host; }
  // A matrix [n, k] that only linear() will read, as its weight. A backend that
  // repacks_linear_weights() copies it into its kernels' own layout (the result keeps
  // the shape and dtype, but only this backend's linear() may read its memory); the
  // others give prepare_weight(host). The decoder then also stacks q/k/v and gate/up
  // into one matrix each first, as the copy costs nothing more.
  virtual Tensor prepare_linear_weight(const Tensor& host) { return prepare_weight(host); }
  virtual bool repacks_linear_weights() const { return false; }
  // A norm whose output only attention_input() or mlp_input() read, with the weights of
  // the products there that read it (prepared). The backend may move the norm's scale
  // into those weights (each rounded to its dtype) and mark the norm folded, where its
  // products then need no pass of the norm of their own. Nothing by default.
  virtual void prepare_input_norm(NormParams& norm, std::span<Tensor* const> readers) {
    (void)norm;
    (void)readers;
  }
  // A host copy of a device tensor (the tensor itself on the CPU). Waits for the work
  // that produces it.
  virtual Tensor to_host(const Tensor& t) { return t; }
  // Waits for all queued device work; reports a device-side fault as Internal.
  virtual void synchronize() {}
  struct MemoryInfo {
    int64_t free_bytes = 0;   // free on the device, plus what the backend caches unused
    int64_t total_bytes = 0;  // 0: unknown (host memory)
  };
  virtual MemoryInfo memory_info() const { return {}; }

  // Records the device work fn() queues, without running it, for replay(); null when
  // this backend cannot (the CPU). fn must only queue work: no waiting for the device,
  // no host reads of device memory, no uploads from host memory (those are recorded by
  // address, not by value).
  virtual std::unique_ptr<DeviceGraph> record(const std::function<void()>& fn) {
    (void)fn;
    return nullptr;
  }

  // ---- memory -------------------------------------------------------------------
  // An uninitialised tensor on the device.
  virtual Tensor alloc(const Shape& shape, DType dtype) = 0;
  // A device tensor of `shape` and `dtype` copied from host memory. `reuse`, when it is
  // a device buffer of that dtype with enough room, is filled (and viewed with the new
  // shape) instead of allocating.
  virtual Tensor upload(const void* data, const Shape& shape, DType dtype, Tensor reuse) = 0;
  Tensor upload_i32(const int32_t* data, int64_t count, Tensor reuse = {}) {
    return upload(data, {count}, DType::kI32, std::move(reuse));
  }
  // Copies a device tensor into host memory of src.nbytes() bytes.
  virtual void download(const Tensor& src, void* dst) = 0;
  virtual void fill_zero(Tensor& t) = 0;

  // ---- work in flight -------------------------------------------------------------
  // Host memory that download_async() can copy into while the host goes on (pinned on
  // a GPU). Uninitialised.
  virtual Tensor alloc_host(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype); }
  // Queues a copy of a device tensor into dst (src.nbytes() bytes of alloc_host()
  // memory) behind the work queued so far; the bytes are there once a fence() queued
  // after it has been waited for. This default copies at once.
  virtual void download_async(const Tensor& src, void* dst) { download(src, dst); }
  // A fence behind the work queued so far; wait_fence() returns once that work is done
  // (later work may still run) and reports a device-side fault as Internal, as
  // synchronize() does. Fences are waited for in the order they were made.
  virtual uint64_t fence() { return 0; }
  virtual void wait_fence(uint64_t f) { (void)f; }

  // ---- embeddings ---------------------------------------------------------------
  // out[t, :] (= or +=) scale * table[ids[t] + id_offset, :].
  // table [V, D] any float dtype; ids [T] i32 (each id + id_offset in [0, V)); out [T, D]
  // in the activation dtype or f32 (the decoder gathers f32 rotary rows this way).
  virtual void embedding(const Tensor& table, const Tensor& ids, int32_t id_offset, float scale,
                         bool accumulate, Tensor& out) = 0;

  // ---- norms ----------------------------------------------------------------------
  // residual [T, D] in/out; deltas [T, D] (each optional); out [T, D] (may be residual).
  // residual += delta1 + delta2; out = norm(residual). With no deltas it is a plain norm.
  virtual void add_norm(Tensor& residual, const Tensor& delta1, const Tensor& delta2,
                        const NormParams& norm, Tensor& out) = 0;
  // Per-head norm over the q and k parts of qkv [T, layout.row_cols()] in place
  // (Qwen3's q_norm / k_norm): weights [head_dim] each.
  virtual void qk_norm(Tensor& qkv, const QkvLayout& layout, const NormParams& q_norm,
                       const NormParams& k_norm) = 0;

  // ---- dense ----------------------------------------------------------------------
  // out[:, col_offset : col_offset + N] = act(x · wᵀ + bias).
  // x [T, K]; w [N, K] (prepared); bias [N] f32 optional (a 16-bit backend adds it in
  // its compute dtype, like its weights); out [T, >= col_offset + N] in the activation
  // dtype or f32 (logits).
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                      int64_t col_offset = 0, Activation act = Activation::kIdentity) = 0;
  // The adapters of one product (LoraTarget): for each token t of x [T, K] whose
  // step.row_slots[t] = s >= 0, out[t, col_offset + c] += sum_{j < r} B_s[c, j] *
  // (A_s[p R + j, :] · x[t, :]), p the part of column c, r = ranks[s, rank_index + p];
  // the sum rounded once to out's dtype. out [T, >= col_offset + N] in the activation
  // dtype; rows of the base model (-1) are untouched.
  virtual void lora(const Tensor& x, const LoraStep& step, const LoraTarget& target, Tensor& out,
                    int64_t col_offset) = 0;
  // out[t, i] = act(in[t, i]) * in[t, I + i]; in [T, 2I] ([gate | up]), out [T, I].
  virtual void gated_activation(const Tensor& in, Activation act, Tensor& out) = 0;
  // x = act(x) in place, x [T, N].
  virtual void activation(Tensor& x, Activation act) = 0;
  // out = a + b, all [T, N].
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) {
    scale_add(a, 1.f, b, out);  // 1 * a + b is a + b exactly
  }
  // out = scale * a + b, all [T, N] (out may be b, not a). A residual taken from a norm's
  // output and scaled (ChatGLM-6B: sqrt(2 * num_layers) * LN(x) + attn(LN(x))).
  virtual void scale_add(const Tensor& a, float scale, const Tensor& b, Tensor& out) = 0;
  // x = cap * tanh(x / cap) in place.
  virtual void softcap(Tensor& x, float cap) = 0;
  // x = clamp(x, -limit, limit) in place.
  virtual void clamp(Tensor& x, float limit) = 0;
  // out[r, :] = src[rows[r], :]; src [T, N], rows [R] i32, out [R, N].
  virtual void gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) = 0;
  // out[rows[i], :] = src[i, :] for each i (converted to out's dtype); src [n, N] f32,
  // rows [n] i32 (each in [0, T), none twice), out [T, N]. A row out of range is
  // skipped. (Embeddings given for some rows of a step, e.g. image features, replacing
  // the token embeddings there.)
  virtual void scatter_rows(const Tensor& src, const Tensor& rows, Tensor& out) = 0;
  // ids[pairs[j][0]] = src[pairs[j][1]] for each pair j, or 0 where that source is
  // negative (not a token id); ids [T], src [R], pairs [P, 2], all i32. A pair out of
  // range is skipped. (A step's input tokens taken from the ids the step before chose.)
  virtual void scatter_ids(const Tensor& src, const Tensor& pairs, Tensor& ids) = 0;
  // out[t, :] += sigmoid(gate_logit[t, 0]) * src[t, :]; out, src [T, N]; gate_logit [T, 1].
  virtual void add_sigmoid_gated(const Tensor& src, const Tensor& gate_logit, Tensor& out) = 0;

  // ---- attention ------------------------------------------------------------------
  // Rotates the first rotary_dim dims of every q and k head of qkv [T, row_cols] in
  // place. cos_sin [T, rotary_dim] f32: per token rotary_dim/2 cosines then
  // rotary_dim/2 sines, one per frequency (any attention scaling already folded in).
  virtual void rotary(Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                      RotaryStyle style, int32_t rotary_dim) = 0;
  // Multiplies the q part of every row of qkv [T, row_cols] by factors[t] (factors [T]
  // f32): per-query scaling of the attention logits (log-n scaling past the training
  // length). This default goes through host memory; a backend may override it.
  virtual void scale_queries(Tensor& qkv, const QkvLayout& layout, const Tensor& factors) {
    TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols() &&
                      qkv.dtype() == DType::kF32 && factors.numel() == qkv.dim(0),
                  "scale_queries qkv {} factors {}", qkv.str(), factors.str());
    std::vector<float> rows(static_cast<size_t>(qkv.numel()));
    std::vector<float> f(static_cast<size_t>(factors.numel()));
    download(qkv, rows.data());
    download(factors, f.data());
    const int64_t cols = layout.row_cols();
    for (int64_t t = 0; t < qkv.dim(0); ++t)
      for (int64_t c = 0; c < layout.q_cols(); ++c) rows[t * cols + c] *= f[t];
    qkv = upload(rows.data(), qkv.shape(), DType::kF32, qkv);
  }
  // Writes the k and v parts of qkv [T, row_cols] into the cache at slots [T] i32
  // (physical slot = block * block_size + offset; a negative slot is skipped).
  virtual void write_kv(const Tensor& qkv, const QkvLayout& layout, const Tensor& slots,
                        LayerKvCache& cache) = 0;
  // rotary() then write_kv(); a backend may do both in one pass.
  virtual void rotary_write_kv(Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                               RotaryStyle style, int32_t rotary_dim, const Tensor& slots,
                               LayerKvCache& cache) {
    rotary(qkv, layout, cos_sin, style, rotary_dim);
    write_kv(qkv, layout, slots, cache);
  }
  // Causal attention of the step's queries (the q part of qkv) over each sequence's
  // cached keys/values (which already include this step's). Query t of sequence s, the
  // i-th of its q_len tokens, sits at cache index context_len - q_len + i and sees keys
  // [0, that index] (narrowed by the sliding window; widened to the sequence's
  // bidirectional prefix when meta.prefix_lens is given; the step's own keys narrowed
  // by meta.tree_mask when given). Query head h reads KV head
  // h / (num_heads / num_kv_heads). out [T, num_heads * head_dim]. Block-table entries
  // for blocks wholly before every query's sliding window are not read (may be -1).
  virtual void attention(const Tensor& qkv, const QkvLayout& layout, const LayerKvCache& cache,
                         const AttentionMeta& meta, const AttentionParams& params, Tensor& out) = 0;
  // Copies whole blocks src -> dst in a cache tensor [num_blocks, ...].
  virtual void copy_blocks(Tensor& cache,
                           const std::vector<std::pair<int32_t, int32_t>>& pairs) = 0;
  // Host memory for KV blocks swapped out of a cache: a tensor [num_blocks, ...] that
  // copy_blocks_between() can read and write beside a cache (pinned and mapped for a
  // GPU; plain host memory on the CPU). Uninitialised.
  virtual Tensor alloc_swap(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype); }
  // Copies block src of `from` into block dst of `to` for every (src, dst) pair, in
  // queue order with the other ops; `from` and `to` have the same block shape and dtype,
  // either may be alloc_swap() memory. Throws InvalidArgument for a block out of range.
  virtual void copy_blocks_between(const Tensor& from, Tensor& to,
                                   const std::vector<std::pair<int32_t, int32_t>>& pairs) = 0;

  // ---- layer-level products ------------------------------------------------------
  // The parts of a layer the decoder writes as one step each. These forms compose the
  // ops above; a backend overrides them to fuse what its kernels can (a norm, a rotary,
  // a cache write or a residual add inside a product) and decides that by itself.
  //
  // Each takes the step's adapters `lora` (null: none): every product there also adds
  // its adapters' delta (lora()) before anything reads it.
  //
  // qkv [T, layout.row_cols()] = the products of p of norm(x) (of x itself when norm is
  // null), then p's clamp, per-head norms, the q part scaled by logn [T] f32 (when
  // given) and the rotary by cos_sin [T, rot] f32 (rotary models); the k and v parts
  // are then written into the cache at slots [T] (as write_kv). x [T, K] is untouched.
  virtual void attention_input(const Tensor& x, const NormParams* norm, const AttentionInput& p,
                               const Tensor& cos_sin, const Tensor& logn, const Tensor& slots,
                               LayerKvCache& cache, Tensor& qkv, const LoraStep* lora);
  // out [T, I] = the MLP input of p (MlpInput) of norm(x) (of x itself when norm is null).
  virtual void mlp_input(const Tensor& x, const NormParams* norm, const MlpInput& p, Tensor& out,
                         const LoraStep* lora);
  // residual [T, N] += x · wᵀ + b (the sum rounded once to residual's dtype), then the
  // adapters' delta; x [T, K].
  virtual void linear_residual(const Tensor& x, const LinearWeights& w, Tensor& residual,
                               const LoraStep* lora);

  // ---- mixture of experts ---------------------------------------------------------
  // Softmax over router logits [T, E] (activation dtype or f32), the top_k largest
  // (ties: lower expert id first), optionally renormalised to sum to 1.
  // ids [T, top_k] i32, weights [T, top_k] f32.
  virtual void moe_route(const Tensor& logits, int32_t top_k, bool renormalize, Tensor& ids,
                         Tensor& weights) = 0;
  // out[t] (= or +=) sum_k weights[t, k] * expert_{ids[t, k]}(x[t]), where an expert is
  // down(act(gate(x)) * up(x)). x [T, D]; out [T, D].
  virtual void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const std::vector<MoeExpertWeights>& experts, Activation act,
                           bool accumulate, Tensor& out) = 0;

  // ---- sampling helpers (on f32 logits [R, V], so that only token ids and the
  // log-probabilities asked for need to leave the device) ----------------------------
  // ids [R] i32: the index of each row's largest logit, the lowest on ties; -1 for a
  // row holding NaN.
  virtual void argmax(const Tensor& logits, Tensor& ids) = 0;
  // Each row replaced by its log-softmax, in place.
  virtual void log_softmax(Tensor& logits) = 0;

  // ---- sampling on the device (backend/sampling.h) ----------------------------------
  // Whether sample() runs on this backend (otherwise the logits go to the host).
  virtual bool supports_sampling() const { return false; }
  // Chooses one token per kDevice row of logits [R, V] f32 (R = batch.rows.size()):
  // applies the row's TokenAdjustments in place, then greedy or temperature / top_k /
  // top_p / min_p sampling keyed by the row's Philox key; the result depends on that row
  // alone. kHost rows are left untouched. ids [R] i32 on the device: the token, or
  // kTokenOnHost, kTokenBadLogits (NaN or +inf), kTokenNoneAllowed (all -inf).
  // logprobs [R] f32 on the device: for each row given a token, its log-probability in
  // the distribution it was drawn from, log-softmax of the adjusted row over the row's
  // temperature (1 when greedy; top_k / top_p / min_p do not renormalize it); others 0.
  virtual void sample(Tensor& logits, const SamplingBatch& batch, Tensor& ids, Tensor& logprobs) {
    (void)logits;
    (void)batch;
    (void)ids;
    (void)logprobs;
    TACHYON_CHECK(false, "the {} backend does not sample on its device", name());
  }

 protected:
  // Buffers the layer-level products' default forms work in.
  enum class Workspace : uint8_t { kNormed, kProduct, kGateUp, kCount };
  // A [rows, cols] buffer of the slot, kept and grown between calls; its contents last
  // until the slot's next use. A backend whose recorded graphs read it overrides this to
  // tell them when it moves.
  virtual Tensor workspace(Workspace slot, int64_t rows, int64_t cols, DType dtype);
  // norm(x) in the kNormed workspace (x untouched).
  Tensor normed(const Tensor& x, const NormParams& norm);
  // out[:, col_offset :] = x · wᵀ + b, plus the adapters' delta of w.lora when lora is
  // given.
  void product(const Tensor& x, const LinearWeights& w, Tensor& out, int64_t col_offset,
               const LoraStep* lora);

 private:
  Tensor workspace_[static_cast<size_t>(Workspace::kCount)];
};

// The CPU backend (multi-threaded over the global ThreadPool), its KV cache in kv_dtype
// (f32, bf16 or i8; InvalidArgument otherwise).
std::unique_ptr<Backend> make_cpu_backend(DType kv_dtype = DType::kF32);

}  // namespace tachyon
