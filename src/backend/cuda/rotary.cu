// Rotary position embedding over the q and k heads of the fused qkv rows, in place:
// one thread per (token, head, frequency pair). The fused variant also writes the
// step's k (rotated) and v heads into the paged cache in the same pass.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

// The dims rotary pair p (of half = rot / 2 pairs) turns, in each style.
template <KRotary kStyle>
__device__ __forceinline__ void pair_dims(int p, int half, int& i0, int& i1) {
  if constexpr (kStyle == KRotary::kInterleaved) {
    i0 = 2 * p;
    i1 = 2 * p + 1;
  } else if constexpr (kStyle == KRotary::kHalf2D) {
    const int quarter = half / 2;  // rotate_half within each half of the rotated dims
    i0 = (p / quarter) * half + p % quarter;
    i1 = i0 + quarter;
  } else {
    i0 = p;
    i1 = p + half;
  }
}

template <typename T, KRotary kStyle>
__global__ void rotary_kernel(T* qkv, int64_t tokens, int64_t cols, int heads, int hd,
                              const float* __restrict__ cos_sin, int rot) {
  const int half = rot / 2;
  const int64_t n = tokens * heads * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int p = static_cast<int>(i % half);
    const int64_t th = i / half;
    const int h = static_cast<int>(th % heads);
    const int64_t t = th / heads;
    const float c = cos_sin[t * rot + p];
    const float s = cos_sin[t * rot + half + p];
    T* v = qkv + t * cols + int64_t{h} * hd;
    int i0, i1;
    pair_dims<kStyle>(p, half, i0, i1);
    const float x0 = to_f(v[i0]), x1 = to_f(v[i1]);
    v[i0] = from_f<T>(x0 * c - x1 * s);
    v[i1] = from_f<T>(x1 * c + x0 * s);
  }
}

// One thread per (token, head of q|k|v, pair of dims). Pairs below rot/2 are rotary
// pairs (rotated in place for q and k); the rest cover the unrotated dims two at a time.
// k and v heads go to the cache at slots[t] (negative: skipped).
template <typename T, KRotary kStyle>
__global__ void rotary_write_kv_kernel(T* qkv, int64_t tokens, int64_t cols, int heads,
                                       int kv_heads, int hd, const float* __restrict__ cos_sin,
                                       int rot, const int32_t* __restrict__ slots, T* kc, T* vc,
                                       int64_t num_blocks, int bs, int* err) {
  const int half = rot / 2, pairs = hd / 2;
  const int all_heads = heads + 2 * kv_heads;
  const int64_t n = tokens * all_heads * pairs;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int p = static_cast<int>(i % pairs);
    const int64_t th = i / pairs;
    const int h = static_cast<int>(th % all_heads);
    const int64_t t = th / all_heads;
    T* v = qkv + t * cols + int64_t{h} * hd;
    int i0, i1;
    if (p < half) {
      pair_dims<kStyle>(p, half, i0, i1);
    } else {
      i0 = rot + 2 * (p - half);
      i1 = i0 + 1;
    }
    T y0 = v[i0], y1 = v[i1];
    if (p < half && h < heads + kv_heads) {
      const float c = cos_sin[t * rot + p];
      const float s = cos_sin[t * rot + half + p];
      const float x0 = to_f(y0), x1 = to_f(y1);
      y0 = from_f<T>(x0 * c - x1 * s);
      y1 = from_f<T>(x1 * c + x0 * s);
      v[i0] = y0;
      v[i1] = y1;
    }
    if (h < heads) continue;
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    if (slot >= num_blocks * bs) {
      if (p == 0) report(err, kErrKvSlot);
      continue;
    }
    const bool is_k = h < heads + kv_heads;
    const int kvh = is_k ? h - heads : h - heads - kv_heads;
    const int64_t base = ((slot / bs * int64_t{kv_heads} + kvh) * bs + slot % bs) * hd;
    T* dst = (is_k ? kc : vc) + base;
    dst[i0] = y0;
    dst[i1] = y1;
  }
}

}  // namespace

void launch_rotary_write_kv(void* qkv, DType type, int64_t tokens, int64_t cols, int heads,
                            int kv_heads, int head_dim, const float* cos_sin, int rot,
                            KRotary style, const int32_t* slots, void* k_cache, void* v_cache,
                            int64_t num_blocks, int block_size, int* err, cudaStream_t stream) {
  const int64_t n = tokens * (heads + 2 * kv_heads) * (head_dim / 2);
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 65536));
  TACHYON_DISPATCH_FLOAT(type, T, {
    auto go = [&](auto kernel) {
      kernel<<<blocks, 256, 0, stream>>>(static_cast<T*>(qkv), tokens, cols, heads, kv_heads,
                                         head_dim, cos_sin, rot, slots, static_cast<T*>(k_cache),
                                         static_cast<T*>(v_cache), num_blocks, block_size, err);
    };
    if (style == KRotary::kInterleaved)
      go(rotary_write_kv_kernel<T, KRotary::kInterleaved>);
    else if (style == KRotary::kHalf2D)
      go(rotary_write_kv_kernel<T, KRotary::kHalf2D>);
    else
      go(rotary_write_kv_kernel<T, KRotary::kHalf>);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_rotary(void* qkv, DType type, int64_t tokens, int64_t cols, int heads, int head_dim,
                   const float* cos_sin, int rot, KRotary style, cudaStream_t stream) {
  const int64_t n = tokens * heads * (rot / 2);
  if (n == 0 || style == KRotary::kNone) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 65536));
  TACHYON_DISPATCH_FLOAT(type, T, {
    auto go = [&](auto kernel) {
      kernel<<<blocks, 256, 0, stream>>>(static_cast<T*>(qkv), tokens, cols, heads, head_dim,
                                         cos_sin, rot);
    };
    if (style == KRotary::kInterleaved)
      go(rotary_kernel<T, KRotary::kInterleaved>);
    else if (style == KRotary::kHalf2D)
      go(rotary_kernel<T, KRotary::kHalf2D>);
    else
      go(rotary_kernel<T, KRotary::kHalf>);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
