// Launchers of the CUDA kernels (one .cu file per kernel family). They take raw
// device pointers, the storage dtype and the stream; shapes are validated by the
// caller (CudaBackend). `err` is the backend's device error word (codes below).
// This header and the .cu files stay free of backend/ops.h and core/error.h (nvcc
// cannot compile the fmt headers those bring); the enums below mirror ops.h's, value
// for value (checked in cuda_ops.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tachyon::cuda {

enum class KAct : int { kIdentity, kSilu, kGelu, kGeluTanh, kRelu, kQuickGelu };
enum class KNorm : int { kRMSNorm, kLayerNorm };
enum class KRotary : int { kNone, kHalf, kInterleaved, kHalf2D };  // as RotaryStyle

// Codes a kernel ORs into the device error word on input it cannot honour.
enum DeviceError : int {
  kErrEmbeddingId = 1,
  kErrKvSlot = 2,
  kErrBlockTable = 4,
  kErrExpertId = 8,
  kErrGatherRow = 16,
};

// ---- convert.cu -------------------------------------------------------------------
// dst[i] = dtype-convert(src[i]) for n elements (f32/f16/bf16 either side).
void launch_convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n,
                    cudaStream_t stream);

// ---- embedding.cu -----------------------------------------------------------------
// out[t, :] (= or +=) scale * table[ids[t] + id_offset, :]; table [vocab, dim].
void launch_embedding(const void* table, DType table_type, int64_t vocab, int64_t dim,
                      const int32_t* ids, int64_t n, int32_t id_offset, float scale,
                      bool accumulate, void* out, DType out_type, int* err, cudaStream_t stream);

// ---- norm.cu ----------------------------------------------------------------------
struct NormArgs {
  const float* weight = nullptr;
  const float* bias = nullptr;
  KNorm type = KNorm::kRMSNorm;
  float eps = 1e-5f;
  float weight_offset = 0.f;
};
// residual [rows, d] += delta1 + delta2 (each optional); out = norm(residual).
void launch_add_norm(void* residual, const void* delta1, const void* delta2, DType type,
                     int64_t rows, int64_t d, const NormArgs& norm, void* out, cudaStream_t stream);
// Per-head norm of the first q_heads (q_norm) and next k_heads (k_norm) heads of each
// row of qkv [rows, cols], in place.
void launch_qk_norm(void* qkv, DType type, int64_t rows, int64_t cols, int q_heads, int k_heads,
                    int head_dim, const NormArgs& q_norm, const NormArgs& k_norm,
                    cudaStream_t stream);

// out[r, c] = w[r, c] * (offset + scale[c]), rounded; w, out [rows, k] in f32, f16 or
// bf16 (a norm's scale folded into the weight that reads the norm's output).
void launch_fold_norm(const void* w, void* out, DType type, int64_t rows, int64_t k,
                      const float* scale, float offset, cudaStream_t stream);
// out[r] = 1 / sqrt(mean(x[r, :]²) + eps) in f32 for x [rows, d] (f32, f16 or bf16): the
// row scales of an RMS norm whose weight is folded into the product that reads x
// (WgmmaGemmArgs::row_scale).
void launch_row_inv_rms(const void* x, DType type, int64_t rows, int64_t d, float eps, float* out,
                        cudaStream_t stream);
// The same from sums of squares given in parts: out[r] = 1 / sqrt(sum_p squares[p * rows
// + r] / d + eps), the parts added in order (WgmmaGemmArgs::row_squares).
void launch_row_inv_rms_parts(const float* squares, int parts, int64_t rows, int64_t d, float eps,
                              float* out, cudaStream_t stream);
// launch_row_inv_rms_parts calls so far in this process (tests: that kept squares served).
int64_t row_inv_rms_parts_launches();

// ---- elementwise.cu ---------------------------------------------------------------
// y[r, c] = act(y[r, c] + bias[c]) for a [rows, cols] view with row stride ld.
void launch_bias_act(void* y, DType type, int64_t ld, int64_t rows, int64_t cols, const float* bias,
                     KAct act, cudaStream_t stream);
// out[r, i] = act(in[r, i]) * in[r, inter + i]; in [rows, 2 inter], out [rows, inter].
void launch_gated(const void* in, void* out, DType type, int64_t rows, int64_t inter, KAct act,
                  cudaStream_t stream);
// out = scale * a + b (add: scale 1, exact).
void launch_scale_add(const void* a, float scale, const void* b, void* out, DType type, int64_t n,
                      cudaStream_t stream);
void launch_softcap(void* x, DType type, int64_t n, float cap, cudaStream_t stream);
void launch_clamp(void* x, DType type, int64_t n, float limit, cudaStream_t stream);
// out[r, :] = src[rows[r], :]; src [src_rows, cols].
void launch_gather_rows(const void* src, DType type, int64_t src_rows, int64_t cols,
                        const int32_t* rows, int64_t n, void* out, int* err, cudaStream_t stream);
// out[rows[i], :] = src[i, :] (f32, converted to out's dtype) for i < n; rows out of
// [0, out_rows) are skipped.
void launch_scatter_rows(const float* src, int64_t n, int64_t cols, const int32_t* rows, void* out,
                         DType type, int64_t out_rows, cudaStream_t stream);
// ids[pairs[j][0]] = src[pairs[j][1]] (0 where that is negative) for j < n_pairs; pairs
// out of [0, n_ids) x [0, src_n) are skipped.
void launch_scatter_ids(const int32_t* src, int64_t src_n, const int32_t* pairs, int64_t n_pairs,
                        int32_t* ids, int64_t n_ids, cudaStream_t stream);
// x[r, c] *= factors[r] for c < cols of a [rows, >= cols] view with row stride ld.
void launch_scale_rows(void* x, DType type, int64_t rows, int64_t cols, int64_t ld,
                       const float* factors, cudaStream_t stream);
// out[r, :] += sigmoid(gate[r]) * src[r, :].
void launch_add_sigmoid_gated(const void* src, const void* gate, DType type, int64_t rows,
                              int64_t cols, void* out, cudaStream_t stream);

// ---- rotary.cu --------------------------------------------------------------------
// Rotates the first rot dims of the first `heads` heads of each row of qkv
// [tokens, cols] in place; cos_sin [tokens, rot] f32 (rot/2 cosines, rot/2 sines).
void launch_rotary(void* qkv, DType type, int64_t tokens, int64_t cols, int heads, int head_dim,
                   const float* cos_sin, int rot, KRotary style, cudaStream_t stream);

// rotary over the q and k heads (style not kNone) and the k and v heads written into
// the paged caches at slots[t] (negative: skipped), in one pass. head_dim even. kv_fp8:
// the caches hold e4m3 bytes (type f16 or bf16), else elements of `type`.
void launch_rotary_write_kv(void* qkv, DType type, int64_t tokens, int64_t cols, int heads,
                            int kv_heads, int head_dim, const float* cos_sin, int rot,
                            KRotary style, const int32_t* slots, void* k_cache, void* v_cache,
                            bool kv_fp8, int64_t num_blocks, int block_size, int* err,
                            cudaStream_t stream);

// ---- kv_cache.cu ------------------------------------------------------------------
// Writes the k and v parts of qkv (k at column q_cols, v right after) into the paged
// caches [num_blocks, kv_heads, block_size, head_dim] at slots[t] (negative: skip), as
// e4m3 bytes when kv_fp8 (type f16 or bf16).
void launch_write_kv(const void* qkv, DType type, int64_t tokens, int64_t cols, int64_t q_cols,
                     int kv_heads, int head_dim, const int32_t* slots, void* k_cache, void* v_cache,
                     bool kv_fp8, int64_t num_blocks, int block_size, int* err,
                     cudaStream_t stream);
// The fp8 cache's blocks some sequences read, as elements of `type` (f16 or bf16) in a
// compact staging cache, for the attention kernels that read only 16-bit caches: for
// each listed sequence (items [n_items, 3]: sequence s, first staging block, blocks), its
// first `blocks` table entries (no more than its context_lens[s] needs) are converted
// into staging blocks first, first + 1, ..., and its row of staged_tables [seqs,
// max_blocks] points at them. Blocks wholly before what the sequence's queries see
// through a sliding window (> 0) are neither read nor staged (their staged entry is
// -1), as the attention kernels do not read them. A table entry outside [0,
// num_blocks) is reported (kErrBlockTable) and its staging block zeroed. block_elems:
// kv_heads * block_size * head_dim, a multiple of 16.
void launch_stage_fp8_kv(const void* k_cache, const void* v_cache, DType type,
                         const int32_t* block_tables, const int32_t* query_start,
                         const int32_t* context_lens, int max_blocks, int64_t num_blocks,
                         int block_size, int sliding_window, int64_t block_elems,
                         const int32_t* items, int n_items, int max_items_blocks, void* k_staged,
                         void* v_staged, int32_t* staged_tables, int* err, cudaStream_t stream);
// ---- kv_cache_i8.cu ---------------------------------------------------------------
// write_kv into an int8 cache ([blocks, kv_heads, block_size, head_dim + 4] bytes: each
// row's int8 values, then its f32 scale max|x| / 127); rows f16 or bf16.
void launch_write_kv_i8(const void* qkv, DType type, int64_t tokens, int64_t cols, int64_t q_cols,
                        int kv_heads, int head_dim, const int32_t* slots, void* k_cache,
                        void* v_cache, int64_t num_blocks, int block_size, int* err,
                        cudaStream_t stream);
// Every sequence's blocks up to its context_lens[s] from an int8 cache, as elements of
// `type` (f16 or bf16) in staging block s * max_blocks + b (the staging caches hold
// num_seqs * max_blocks blocks of kv_heads * block_size * head_dim elements), and
// staged_tables [num_seqs, max_blocks] pointing at them (-1 past the context and for
// blocks wholly before what the queries see through a sliding window > 0, which are not
// read). A table entry outside [0, num_blocks) is reported (kErrBlockTable) and its
// block zeroed.
void launch_stage_i8_kv(const void* k_cache, const void* v_cache, DType type,
                        const int32_t* block_tables, const int32_t* query_start,
                        const int32_t* context_lens, int num_seqs, int max_blocks,
                        int64_t num_blocks, int block_size, int sliding_window, int kv_heads,
                        int head_dim, void* k_staged, void* v_staged, int32_t* staged_tables,
                        int* err, cudaStream_t stream);

// Copies whole blocks of block_bytes bytes: pairs [n_pairs, 2] (src, dst) i32.
void launch_copy_blocks(void* cache, int64_t block_bytes, const int32_t* pairs, int n_pairs,
                        cudaStream_t stream);
// The same from one block array into another (a cache and mapped host memory, either way).
void launch_copy_blocks(const void* from, void* to, int64_t block_bytes, const int32_t* pairs,
                        int n_pairs, cudaStream_t stream);

// ---- attention.cu -----------------------------------------------------------------
struct AttentionArgs {
  const void* qkv = nullptr;  // [tokens, qkv_cols]; q heads first
  int64_t qkv_cols = 0;
  int64_t tokens = 0;
  const void* k_cache = nullptr;  // [num_blocks, kv_heads, block_size, head_dim]
  const void* v_cache = nullptr;
  bool kv_fp8 = false;  // the caches hold e4m3 bytes (only the decode kernel reads them)
  void* out = nullptr;  // [tokens, heads * head_dim]
  DType type = DType::kBF16;
  const int32_t* query_start = nullptr;   // [seqs + 1]
  const int32_t* context_lens = nullptr;  // [seqs]
  const int32_t* block_tables = nullptr;  // [seqs, max_blocks]
  int32_t num_seqs = 0;
  int32_t max_blocks = 0;
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.f;
  float softcap = 0.f;
  int32_t sliding_window = 0;
  const float* alibi_slopes = nullptr;  // [heads] or null
  float alibi_scale = 1.f;
  bool alibi_bias_bf16 = false;
  // [seqs] or null: each sequence's bidirectional prefix (AttentionMeta::prefix_lens);
  // only the simple kernel (attention.cu) reads it.
  const int32_t* prefix_lens = nullptr;
  // Or null: the step tokens' tree masks (AttentionMeta::tree_mask, tree_mask_start);
  // the simple (attention.cu) and decode (attention_decode.cu) kernels read them.
  const uint32_t* tree_mask = nullptr;
  const int32_t* tree_mask_start = nullptr;
  int* err = nullptr;
  // Mixed steps split between kernels: the decode kernel leaves sequences with more than
  // one query this step alone (another kernel writes their rows afterwards), the flash
  // kernel's work list leaves out sequences with one query.
  bool single_queries_only = false;
  bool multi_queries_only = false;
};
// Scratch the split-K path needs (bytes), for the host to provide.
struct AttentionPlan {
  int q_tile = 1;      // query tokens per block
  int num_splits = 1;  // key splits per (sequence, kv head, query tile)
  int split_keys =
      0;  // keys per split (decode: of the longest context; each sequence's keys split evenly)
  size_t smem_bytes = 0;
  size_t scratch_bytes = 0;
  // Decode: the splits of a (sequence, KV head) run as one thread-block cluster and
  // merge through distributed shared memory (no scratch, no counters).
  bool cluster = false;
};
AttentionPlan plan_attention(const AttentionArgs& a, int num_sms);
// Runs the plan; scratch (plan.scratch_bytes, may be null when 0) holds split partials.
void launch_attention(const AttentionArgs& a, const AttentionPlan& plan, void* scratch,
                      cudaStream_t stream);

// ---- attention_flash.cu -------------------------------------------------------------
// FlashAttention-2 prefill kernel on mma.sync (bf16/f16; head_dim 64, 80, 96, 128 or
// 256; at most 128 query heads per KV head; causal with an optional sliding window, no
// softcap or ALiBi; 16-byte aligned tensors). Returns false when the arguments are
// outside that (nothing launched). Trusts the max_query_len hint.
bool attention_flash_supports(const AttentionArgs& a);
// Query tokens per block: 128 / (heads / kv_heads).
int attention_flash_q_tile(const AttentionArgs& a);
// The blocks' work from host copies of query_start [seqs + 1] and context_lens [seqs]:
// items [n][kFlashItemInts] of (sequence, the tile's first token in qkv, its query
// count, the cache index of its first query), the tiles with the most keys first.
// (Without the sequences of one query when a.multi_queries_only.)
constexpr int kFlashItemInts = 4;
void attention_flash_items(const AttentionArgs& a, const int32_t* query_start,
                           const int32_t* context_lens, std::vector<int32_t>& items);
// items: a device copy of attention_flash_items' list (num_items items), or null for
// the grid of every (tile, sequence) pair the max_query_len hint allows.
bool launch_attention_flash(const AttentionArgs& a, const int32_t* items, int32_t num_items,
                            cudaStream_t stream);

// ---- attention_flash_wgmma.cu -------------------------------------------------------
// The same prefill attention on Hopper's wgmma (sm_90a image on an sm_90 device;
// bf16/f16, head_dim 64 or 128). launch_attention_flash calls it first, for arguments
// attention_flash_supports accepted; false when it does not apply (nothing launched).
// set_flash_wgmma(false) turns it off (tests: the mma.sync kernel that pre-Hopper
// devices run, on Hopper); active: on, and this device runs the sm_90a image. The
// kernel loads whole K/V tiles with the copy engine (TMA boxes of page runs) where that
// applies (no sliding window; block size a multiple of 8 dividing 64, or of 64), else
// through the loaders' cp.async.
void set_flash_wgmma(bool on);
// Launches that took the copy-engine form so far (for tests).
int64_t flash_tma_launches();
bool attention_flash_wgmma_active(DType type, int head_dim);
bool launch_attention_flash_wgmma(const AttentionArgs& a, const int32_t* items, int32_t num_items,
                                  cudaStream_t stream);

// ---- gemm_wgmma.cu -------------------------------------------------------------------
// The rotary embedding and KV-cache write in a plain product's epilogue
// (WgmmaGemmArgs::rotary): y holds the fused qkv rows [m, (heads + 2 kv_heads) head_dim];
// the q and k heads are rotated and the k and v heads written into the paged caches at
// slots[row], exactly as launch_rotary_write_kv does to the product's rounded output
// (style kHalf or kInterleaved).
struct WgmmaRotaryKv {
  const float* cos_sin = nullptr;  // [m, rot] f32, 16-byte aligned
  int rot = 0;
  KRotary style = KRotary::kHalf;
  int heads = 0, kv_heads = 0, head_dim = 0;
  const int32_t* slots = nullptr;  // [m]; negative: not written
  void* k_cache = nullptr;         // [num_blocks, kv_heads, block_size, head_dim]
  void* v_cache = nullptr;
  bool kv_fp8 = false;  // e4m3 bytes, else elements of the product's dtype
  int64_t num_blocks = 0;
  int block_size = 0;
  int* err = nullptr;  // kErrKvSlot for a slot past the cache
};

// Dense products on Hopper's wgmma and TMA (sm_90a image on an sm_90 device; bf16/f16,
// f32 accumulation): y[m, n_out] (row stride ldy) = x[m, k] · w[:n_out, k]ᵀ, or, with
// up_row >= 0, the gated form y[m, i] = act(x · w[i]ᵀ) * (x · w[up_row + i]ᵀ) for
// i < n_out (gate and up rounded to the storage dtype first, then the activation, as
// the separate gated pass does). w holds w_rows rows of k. Persistent blocks of 128 x
// 256 accumulator tiles walked in groups of 16 row tiles.
struct WgmmaGemmArgs {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  DType type = DType::kBF16;
  int64_t m = 0, n_out = 0, k = 0, ldy = 0, w_rows = 0;
  int64_t up_row = -1;  // >= 0: the gated form
  KAct act = KAct::kIdentity;
  // The epilogue on warps of its own (the consumers hand their tile over and go on),
  // with a ring of three stages instead of four.
  bool handoff = false;
  // With the hand-off, plain products only: y += the product (the rounded product added
  // to y and rounded again, as linear() and then an add would), or the rotary and KV
  // write above.
  bool add = false;
  const WgmmaRotaryKv* rotary = nullptr;
  // Non-null: the product's row r scaled by row_scale[r] (f32, m of them, 4-byte
  // aligned) before the epilogue rounds it. With x the un-normalised input of an RMS norm
  // whose weight is folded into w's columns (fold_norm) and the scales from
  // launch_row_inv_rms, the product of the normalised rows (no norm pass writes them).
  // The hand-off's gated and rotary forms.
  const float* row_scale = nullptr;
  // Non-null, with add: the sum of the squares of each row of y after the add (the
  // rounded values it stores), one per row and 256-column tile:
  // row_squares[t * m + r] for t < gemm_wgmma_square_parts(n_out) (4-byte aligned);
  // launch_row_inv_rms_parts turns them into row_scale's factors for a product that
  // reads y next, without another pass over it.
  float* row_squares = nullptr;
  // At most this many blocks (0: as many as the device holds; tests).
  int max_blocks = 0;
};
// Active: this device runs the sm_90a image (and the tensor-map encoder is there).
bool gemm_wgmma_active(DType type);
// Shapes, alignments and sizes the kernel takes (x and w 16-byte aligned, k a multiple
// of 8, every size below 2^30; for the gated form and the hand-off ldy a multiple of 8
// and y 16-byte aligned, and the gated form without hand-off n_out a multiple of 8;
// otherwise n_out and ldy even and y 4-byte aligned; add and rotary: the hand-off, whole
// 16-byte pieces; rotary: head_dim a multiple of 8 dividing 256, rot a multiple of 16 up
// to head_dim, n_out the heads' columns; row_scale 4-byte aligned, with the hand-off and
// the gated or rotary form).
bool gemm_wgmma_supports(const WgmmaGemmArgs& a);
// False, having launched nothing, where it is not active or does not support a.
bool launch_gemm_wgmma(const WgmmaGemmArgs& a, cudaStream_t stream);
// The plain product y[m, n] (row stride ldy) = x[m, k] · w[n, k]ᵀ in `type`, every other
// field at its default.
inline WgmmaGemmArgs wgmma_product(const void* x, const void* w, void* y, DType type, int64_t m,
                                   int64_t n, int64_t k, int64_t ldy) {
  WgmmaGemmArgs g;
  g.x = x;
  g.w = w;
  g.y = y;
  g.type = type;
  g.m = m;
  g.n_out = n;
  g.w_rows = n;
  g.k = k;
  g.ldy = ldy;
  return g;
}
// Launches so far in this process (tests: that a path was taken).
int64_t gemm_wgmma_launches();
// Of those, the launches that scaled the product's rows (row_scale).
int64_t gemm_wgmma_rms_launches();
// The parts of WgmmaGemmArgs::row_squares for an output of n_out columns.
int gemm_wgmma_square_parts(int64_t n_out);

// ---- attention_decode.cu ------------------------------------------------------------
// FlashDecoding-style tensor-core kernel for decode steps and steps of short queries
// (up to kDecodeMaxQueries tokens per sequence: draft tokens being verified, chained or
// in a tree mask; longer ones are handled, slowly): bf16/f16, head_dim 64, 128 or 256,
// at most 8 query heads per KV head. The plan splits the keys (from the max_context_len
// hint, the number of sequences and their query passes, and the device's SMs) and sizes
// the scratch; the kernel reads the real context lengths on the device. Split keys are
// merged by the last block of each (sequence, pass, KV head), counted in `counters`
// (num_seqs * passes * kv_heads of them, zero between launches and left zero); with
// fewer counters a separate merge kernel runs. Plans of
// 2..16 splits whose clusters fit the device run each pair's splits as one cluster
// that merges in distributed shared memory instead: the backend turns that on from
// compute capability 9.0 (set_decode_cluster_merge; tests turn it off to run the
// counters' merge that older devices take).
inline constexpr int32_t kDecodeMaxQueries = 16;
bool attention_decode_supports(const AttentionArgs& a);
void set_decode_cluster_merge(bool on);
bool decode_cluster_merge();
AttentionPlan plan_attention_decode(const AttentionArgs& a, int num_sms);
void launch_attention_decode(const AttentionArgs& a, const AttentionPlan& plan, void* scratch,
                             int* counters, int64_t num_counters, cudaStream_t stream);

// ---- gemv.cu ------------------------------------------------------------------------
// y[i, j] (row stride ldy) = sum_c x[i, c] w[j, c] for m <= kGemvMaxRows rows: x [m, k]
// and w [n, k] bf16 or f16 (16-byte aligned, k a multiple of 8), y in that dtype or f32.
constexpr int64_t kGemvMaxRows = 4;
bool gemv_supports(DType type, DType y_type, int64_t m, int64_t k, const void* x, const void* w);
// add: y += the product, the sum rounded once to y's dtype.
void launch_gemv(const void* x, const void* w, DType type, void* y, DType y_type, int64_t m,
                 int64_t n, int64_t k, int64_t ldy, bool add, cudaStream_t stream);

// ---- moe.cu -----------------------------------------------------------------------
// Per token: softmax over logits [tokens, experts], the top_k largest (ties: lower id),
// optionally renormalised. ids / weights [tokens, top_k].
void launch_moe_route(const void* logits, DType type, int64_t tokens, int experts, int top_k,
                      bool renormalize, int32_t* ids, float* weights, cudaStream_t stream);
// out[t] (= or +=) sum_k weights[t, k] * y[row_of[t * top_k + k]]; y [tokens * top_k, d].
void launch_moe_combine(const void* y, DType type, int64_t tokens, int top_k, int64_t d,
                        const int32_t* row_of, const float* weights, bool accumulate, void* out,
                        cudaStream_t stream);

// ---- sampling.cu ------------------------------------------------------------------
// ids[r] = index of the largest logit of row r (lowest on ties; -1 if the row has NaN).
void launch_argmax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                   cudaStream_t stream);
// x[r, :] = log_softmax(x[r, :]) in place.
void launch_log_softmax(float* x, int64_t rows, int64_t vocab, cudaStream_t stream);

}  // namespace tachyon::cuda
