// Paged KV cache writes (one thread per element of a token's k and v heads) and whole
// block copies (copy-on-write of shared prefixes).
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

template <typename T>
__global__ void write_kv_kernel(const T* __restrict__ qkv, int64_t tokens, int64_t cols,
                                int64_t q_cols, int kvh, int hd, const int32_t* __restrict__ slots,
                                T* __restrict__ kc, T* __restrict__ vc, int64_t num_blocks, int bs,
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
    kc[dst] = krow[e];
    vc[dst] = krow[per_token + e];
  }
}

template <typename V>
__global__ void copy_blocks_kernel(V* cache, int64_t block_elems, const int32_t* pairs) {
  const int64_t src = pairs[2 * blockIdx.y], dst = pairs[2 * blockIdx.y + 1];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < block_elems;
       i += int64_t{gridDim.x} * blockDim.x)
    cache[dst * block_elems + i] = cache[src * block_elems + i];
}

}  // namespace

void launch_write_kv(const void* qkv, DType type, int64_t tokens, int64_t cols, int64_t q_cols,
                     int kv_heads, int head_dim, const int32_t* slots, void* k_cache, void* v_cache,
                     int64_t num_blocks, int block_size, int* err, cudaStream_t stream) {
  const int64_t n = tokens * kv_heads * head_dim;
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 65536));
  TACHYON_DISPATCH_FLOAT(type, T, {
    write_kv_kernel<T><<<blocks, 256, 0, stream>>>(
        static_cast<const T*>(qkv), tokens, cols, q_cols, kv_heads, head_dim, slots,
        static_cast<T*>(k_cache), static_cast<T*>(v_cache), num_blocks, block_size, err);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_copy_blocks(void* cache, int64_t block_bytes, const int32_t* pairs, int n_pairs,
                        cudaStream_t stream) {
  if (n_pairs == 0 || block_bytes == 0) return;
  TACHYON_KERNEL_CHECK(n_pairs <= 65535, "copy_blocks: more than 65535 pairs in one call");
  auto go = [&](auto* typed, int64_t elems) {
    using V = std::remove_pointer_t<decltype(typed)>;
    const unsigned bx = static_cast<unsigned>(std::min<int64_t>(ceil_div(elems, 256), 1024));
    copy_blocks_kernel<V>
        <<<dim3(bx, static_cast<unsigned>(n_pairs)), 256, 0, stream>>>(typed, elems, pairs);
  };
  if (block_bytes % 16 == 0)
    go(static_cast<uint4*>(cache), block_bytes / 16);
  else if (block_bytes % 4 == 0)
    go(static_cast<uint32_t*>(cache), block_bytes / 4);
  else
    go(static_cast<uint8_t*>(cache), block_bytes);
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
