// The int8 KV cache (ops.h kv_cache_shape): each cache row is a token's head_dim int8
// values followed by the 4 bytes of their f32 scale, max|x| / 127 over the row (the CPU
// backend's format and rounding: IEEE division, round to nearest even, NaN to -127).
// Rows are written by one warp each; the attention kernels read 16-bit caches, so a
// step's sequences' blocks are staged as 16-bit elements first.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

constexpr int kRowWarps = 8;

// Warp w of the block: one (token, kv head, k or v) row.
template <typename T>
__global__ void __launch_bounds__(kRowWarps * 32)
    write_kv_i8_kernel(const T* __restrict__ qkv, int64_t tokens, int64_t cols, int64_t q_cols,
                       int kvh, int hd, const int32_t* __restrict__ slots, int8_t* __restrict__ kc,
                       int8_t* __restrict__ vc, int64_t num_blocks, int bs, int* err) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t{kRowWarps} + (threadIdx.x >> 5);
  const int64_t per_token = int64_t{kvh} * 2;
  if (row >= tokens * per_token) return;
  const int64_t t = row / per_token;
  const int which = static_cast<int>(row % per_token) / kvh;  // 0: k, 1: v
  const int h = static_cast<int>(row % per_token) % kvh;
  const int32_t slot = slots[t];
  if (slot < 0) return;
  if (slot >= num_blocks * bs) {
    if (lane == 0 && which == 0 && h == 0) report(err, kErrKvSlot);
    return;
  }
  const T* x = qkv + t * cols + q_cols + (int64_t{which} * kvh + h) * hd;
  float mx = 0.f;
  for (int d = lane; d < hd; d += 32) mx = fmaxf(mx, fabsf(to_f(x[d])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float scale = __fdiv_rn(mx, 127.f);
  const int64_t block = slot / bs, off = slot % bs;
  int8_t* dst = (which == 0 ? kc : vc) + ((block * kvh + h) * bs + off) * (int64_t{hd} + 4);
  for (int d = lane; d < hd; d += 32) {
    const float q = scale > 0.f ? rintf(__fdiv_rn(to_f(x[d]), scale)) : 0.f;
    dst[d] = static_cast<int8_t>(fminf(127.f, fmaxf(q, -127.f)));
  }
  if (lane == 0) *reinterpret_cast<float*>(dst + hd) = scale;
}

// Block (x: table entry, y: sequence): the entry's block of K and V rows as T in staging
// block s * max_blocks + b, and the staged table's entry pointing at it.
template <typename T>
__global__ void stage_i8_kernel(const int8_t* __restrict__ kc, const int8_t* __restrict__ vc,
                                const int32_t* __restrict__ tables,
                                const int32_t* __restrict__ query_start,
                                const int32_t* __restrict__ context_lens, int max_blocks,
                                int64_t num_blocks, int bs, int window, int kvh, int hd,
                                T* __restrict__ ks, T* __restrict__ vs,
                                int32_t* __restrict__ staged_tables, int* err) {
  const int s = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.x);
  const int64_t entry = int64_t{s} * max_blocks + b;
  const int32_t ctx = context_lens[s];
  const int64_t need = (int64_t{ctx} + bs - 1) / bs;
  // Blocks wholly before the first key the sequence's first query sees through a
  // sliding window are not read by the kernels (their table entries may be unset).
  const int32_t q_len = query_start[s + 1] - query_start[s];
  const int32_t first_key = window > 0 ? max(0, ctx - q_len - window + 1) : 0;
  const bool staged = b < need && (int64_t{b} + 1) * bs > first_key;
  if (threadIdx.x == 0) staged_tables[entry] = staged ? static_cast<int32_t>(entry) : -1;
  if (!staged) return;
  const int32_t src = tables[entry];
  const bool good = src >= 0 && src < num_blocks;
  if (!good && threadIdx.x == 0) report(err, kErrBlockTable);
  const int64_t rows = int64_t{kvh} * bs, row_bytes = int64_t{hd} + 4;
  const int8_t* k_in = kc + (good ? src : 0) * rows * row_bytes;
  const int8_t* v_in = vc + (good ? src : 0) * rows * row_bytes;
  T* k_out = ks + entry * rows * hd;
  T* v_out = vs + entry * rows * hd;
  for (int64_t i = threadIdx.x; i < rows * hd; i += blockDim.x) {
    const int64_t r = i / hd, d = i % hd;
    const int8_t* kr = k_in + r * row_bytes;
    const int8_t* vr = v_in + r * row_bytes;
    const float kscale = *reinterpret_cast<const float*>(kr + hd);
    const float vscale = *reinterpret_cast<const float*>(vr + hd);
    k_out[i] = from_f<T>(good ? static_cast<float>(kr[d]) * kscale : 0.f);
    v_out[i] = from_f<T>(good ? static_cast<float>(vr[d]) * vscale : 0.f);
  }
}

}  // namespace

void launch_write_kv_i8(const void* qkv, DType type, int64_t tokens, int64_t cols, int64_t q_cols,
                        int kv_heads, int head_dim, const int32_t* slots, void* k_cache,
                        void* v_cache, int64_t num_blocks, int block_size, int* err,
                        cudaStream_t stream) {
  const int64_t rows = tokens * kv_heads * 2;
  if (rows == 0) return;
  TACHYON_KERNEL_CHECK(type == DType::kBF16 || type == DType::kF16,
                       "write_kv: an int8 cache takes f16 or bf16 rows");
  TACHYON_KERNEL_CHECK(head_dim % 4 == 0, "write_kv: an int8 cache needs head_dim % 4 == 0");
  const unsigned blocks = ceil_div(rows, kRowWarps);
  auto* kc = static_cast<int8_t*>(k_cache);
  auto* vc = static_cast<int8_t*>(v_cache);
  if (type == DType::kBF16)
    write_kv_i8_kernel<bf16_t><<<blocks, kRowWarps * 32, 0, stream>>>(
        static_cast<const bf16_t*>(qkv), tokens, cols, q_cols, kv_heads, head_dim, slots, kc, vc,
        num_blocks, block_size, err);
  else
    write_kv_i8_kernel<f16_t><<<blocks, kRowWarps * 32, 0, stream>>>(
        static_cast<const f16_t*>(qkv), tokens, cols, q_cols, kv_heads, head_dim, slots, kc, vc,
        num_blocks, block_size, err);
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_stage_i8_kv(const void* k_cache, const void* v_cache, DType type,
                        const int32_t* block_tables, const int32_t* query_start,
                        const int32_t* context_lens, int num_seqs, int max_blocks,
                        int64_t num_blocks, int block_size, int sliding_window, int kv_heads,
                        int head_dim, void* k_staged, void* v_staged, int32_t* staged_tables,
                        int* err, cudaStream_t stream) {
  if (num_seqs == 0 || max_blocks == 0) return;
  TACHYON_KERNEL_CHECK(type == DType::kBF16 || type == DType::kF16,
                       "stage_i8_kv: f16 or bf16 staging");
  TACHYON_KERNEL_CHECK(num_seqs <= 65535 && head_dim % 4 == 0,
                       "stage_i8_kv: at most 65535 sequences, head_dim % 4 == 0");
  const dim3 grid(static_cast<unsigned>(max_blocks), static_cast<unsigned>(num_seqs));
  const auto* kc = static_cast<const int8_t*>(k_cache);
  const auto* vc = static_cast<const int8_t*>(v_cache);
  if (type == DType::kBF16)
    stage_i8_kernel<bf16_t><<<grid, 256, 0, stream>>>(
        kc, vc, block_tables, query_start, context_lens, max_blocks, num_blocks, block_size,
        sliding_window, kv_heads, head_dim, static_cast<bf16_t*>(k_staged),
        static_cast<bf16_t*>(v_staged), staged_tables, err);
  else
    stage_i8_kernel<f16_t><<<grid, 256, 0, stream>>>(
        kc, vc, block_tables, query_start, context_lens, max_blocks, num_blocks, block_size,
        sliding_window, kv_heads, head_dim, static_cast<f16_t*>(k_staged),
        static_cast<f16_t*>(v_staged), staged_tables, err);
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
