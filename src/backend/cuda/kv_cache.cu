// Paged KV cache writes (one thread per element of a token's k and v heads), whole
// block copies (copy-on-write of shared prefixes), and the fp8 cache's blocks staged as
// 16-bit elements for the kernels that read only those.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

template <typename T, typename C>
__global__ void write_kv_kernel(const T* __restrict__ qkv, int64_t tokens, int64_t cols,
                                int64_t q_cols, int kvh, int hd, const int32_t* __restrict__ slots,
                                C* __restrict__ kc, C* __restrict__ vc, int64_t num_blocks, int bs,
                                int* err) {
  const int64_t per_token = int64_t{kvh} * hd;
  const int64_t n = tokens * per_token;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / per_token;
    const int64_t e = i % per_token;  // h * hd + d
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    if (slot >= num_blocks * bs) {
      if (e == 0) report(err, kErrKvSlot);
      continue;
    }
    const int64_t block = slot / bs, off = slot % bs;
    const int64_t h = e / hd, d = e % hd;
    const int64_t dst = ((block * kvh + h) * bs + off) * hd + d;
    const T* krow = qkv + t * cols + q_cols;
    kc[dst] = to_cache<C>(krow[e]);
    vc[dst] = to_cache<C>(krow[per_token + e]);
  }
}

// Block (x: piece of a block, y: pair). `from` and `to` may be one cache, or a cache and
// mapped host memory (swap space).
template <typename V>
__global__ void copy_blocks_kernel(const V* from, V* to, int64_t block_elems,
                                   const int32_t* pairs) {
  const int64_t src = pairs[2 * blockIdx.y], dst = pairs[2 * blockIdx.y + 1];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < block_elems;
       i += int64_t{gridDim.x} * blockDim.x)
    to[dst * block_elems + i] = from[src * block_elems + i];
}

// Block (x: block of the item, y: item) of 16 bytes per thread: e4m3 bytes in, T out.
template <typename T>
__global__ void stage_fp8_kernel(const kv_fp8_t* __restrict__ kc, const kv_fp8_t* __restrict__ vc,
                                 const int32_t* __restrict__ tables,
                                 const int32_t* __restrict__ query_start,
                                 const int32_t* __restrict__ context_lens, int max_blocks,
                                 int64_t num_blocks, int bs, int window, int64_t block_elems,
                                 const int32_t* __restrict__ items, T* __restrict__ ks,
                                 T* __restrict__ vs, int32_t* __restrict__ staged_tables,
                                 int* err) {
  const int32_t s = items[3 * blockIdx.y], first = items[3 * blockIdx.y + 1];
  const int32_t n = items[3 * blockIdx.y + 2];
  const int b = static_cast<int>(blockIdx.x);
  const int32_t ctx = context_lens[s];
  const int64_t need = (int64_t{ctx} + bs - 1) / bs;
  if (b >= n || b >= need) return;
  // The first key a query of the sequence sees (its first query's window).
  const int32_t q_len = query_start[s + 1] - query_start[s];
  const int32_t first_key = window > 0 ? max(0, ctx - q_len - window + 1) : 0;
  if ((int64_t{b} + 1) * bs <= first_key) {
    if (threadIdx.x == 0) staged_tables[int64_t{s} * max_blocks + b] = -1;
    return;
  }
  const int32_t src = tables[int64_t{s} * max_blocks + b];
  const bool good = src >= 0 && src < num_blocks;
  if (threadIdx.x == 0) {
    staged_tables[int64_t{s} * max_blocks + b] = first + b;
    if (!good) report(err, kErrBlockTable);
  }
  const int64_t chunks = block_elems / 16;
  const uint4* k_in = reinterpret_cast<const uint4*>(kc + (good ? src : 0) * block_elems);
  const uint4* v_in = reinterpret_cast<const uint4*>(vc + (good ? src : 0) * block_elems);
  uint4* k_out = reinterpret_cast<uint4*>(ks + (int64_t{first} + b) * block_elems);
  uint4* v_out = reinterpret_cast<uint4*>(vs + (int64_t{first} + b) * block_elems);
  for (int64_t i = threadIdx.x; i < chunks; i += blockDim.x) {
    uint4 lo{}, hi{};
    if (good) unpack_e4m3x16<T>(k_in[i], lo, hi);
    k_out[2 * i] = lo;
    k_out[2 * i + 1] = hi;
    if (good) unpack_e4m3x16<T>(v_in[i], lo, hi);
    v_out[2 * i] = lo;
    v_out[2 * i + 1] = hi;
  }
}

}  // namespace

void launch_stage_fp8_kv(const void* k_cache, const void* v_cache, DType type,
                         const int32_t* block_tables, const int32_t* query_start,
                         const int32_t* context_lens, int max_blocks, int64_t num_blocks,
                         int block_size, int sliding_window, int64_t block_elems,
                         const int32_t* items, int n_items, int max_items_blocks, void* k_staged,
                         void* v_staged, int32_t* staged_tables, int* err, cudaStream_t stream) {
  if (n_items == 0 || max_items_blocks == 0) return;
  TACHYON_KERNEL_CHECK(type == DType::kBF16 || type == DType::kF16,
                       "stage_fp8_kv: f16 or bf16 staging");
  TACHYON_KERNEL_CHECK(block_elems % 16 == 0 && n_items <= 65535 && block_size > 0,
                       "stage_fp8_kv: blocks of 16-element multiples, at most 65535 sequences");
  const dim3 grid(static_cast<unsigned>(max_items_blocks), static_cast<unsigned>(n_items));
  const auto* kc = static_cast<const kv_fp8_t*>(k_cache);
  const auto* vc = static_cast<const kv_fp8_t*>(v_cache);
  auto go = [&](auto* ks, auto* vs) {
    using T = std::remove_pointer_t<decltype(ks)>;
    stage_fp8_kernel<T><<<grid, 128, 0, stream>>>(
        kc, vc, block_tables, query_start, context_lens, max_blocks, num_blocks, block_size,
        sliding_window, block_elems, items, ks, vs, staged_tables, err);
  };
  if (type == DType::kBF16)
    go(static_cast<bf16_t*>(k_staged), static_cast<bf16_t*>(v_staged));
  else
    go(static_cast<f16_t*>(k_staged), static_cast<f16_t*>(v_staged));
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_write_kv(const void* qkv, DType type, int64_t tokens, int64_t cols, int64_t q_cols,
                     int kv_heads, int head_dim, const int32_t* slots, void* k_cache, void* v_cache,
                     bool kv_fp8, int64_t num_blocks, int block_size, int* err,
                     cudaStream_t stream) {
  const int64_t n = tokens * kv_heads * head_dim;
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 65536));
  TACHYON_KERNEL_CHECK(!kv_fp8 || type == DType::kBF16 || type == DType::kF16,
                       "write_kv: an fp8 cache takes f16 or bf16 rows");
  auto run = [&]<typename T, typename C>() {
    write_kv_kernel<T, C><<<blocks, 256, 0, stream>>>(
        static_cast<const T*>(qkv), tokens, cols, q_cols, kv_heads, head_dim, slots,
        static_cast<C*>(k_cache), static_cast<C*>(v_cache), num_blocks, block_size, err);
  };
  dispatch_kv(type, kv_fp8, run);
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_copy_blocks(const void* from, void* to, int64_t block_bytes, const int32_t* pairs,
                        int n_pairs, cudaStream_t stream) {
  if (n_pairs == 0 || block_bytes == 0) return;
  auto go = [&](auto* typed, int64_t elems) {
    using V = std::remove_pointer_t<decltype(typed)>;
    const unsigned bx = static_cast<unsigned>(std::min<int64_t>(ceil_div(elems, 256), 1024));
    // Grid y is limited to 65535 pairs a launch.
    for (int first = 0; first < n_pairs; first += 65535) {
      const unsigned n = static_cast<unsigned>(std::min(n_pairs - first, 65535));
      copy_blocks_kernel<V><<<dim3(bx, n), 256, 0, stream>>>(static_cast<const V*>(from), typed,
                                                             elems, pairs + 2 * int64_t{first});
    }
  };
  const auto align = (reinterpret_cast<uintptr_t>(from) | reinterpret_cast<uintptr_t>(to));
  if (block_bytes % 16 == 0 && align % 16 == 0)
    go(static_cast<uint4*>(to), block_bytes / 16);
  else if (block_bytes % 4 == 0 && align % 4 == 0)
    go(static_cast<uint32_t*>(to), block_bytes / 4);
  else
    go(static_cast<uint8_t*>(to), block_bytes);
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_copy_blocks(void* cache, int64_t block_bytes, const int32_t* pairs, int n_pairs,
                        cudaStream_t stream) {
  launch_copy_blocks(cache, cache, block_bytes, pairs, n_pairs, stream);
}

}  // namespace tachyon::cuda
