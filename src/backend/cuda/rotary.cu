// Rotary position embedding over the q and k heads of the fused qkv rows, in place:
// one thread per (token, head, frequency pair). The fused variant also writes the
// step's k (rotated) and v heads into the paged cache in the same pass; where the
// rotary dims come in whole 16-byte vectors it moves 16 bytes per load and store (the
// half and interleaved styles; the 2-D style of GLM goes element by element). An fp8
// cache (C = kv_fp8_t) takes each element rounded to e4m3.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

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
    float y0, y1;
    rotate(to_f(v[i0]), to_f(v[i1]), c, s, y0, y1);
    v[i0] = from_f<T>(y0);
    v[i1] = from_f<T>(y1);
  }
}

// One thread per (token, head of q|k|v, pair of dims): blockIdx.y strides over tokens,
// x over a token's (head, pair) items. Pairs below rot/2 are rotary pairs (rotated in
// place for q and k); the rest cover the unrotated dims two at a time. k and v heads go
// to the cache at slots[t] (negative: skipped).
template <typename T, typename C, KRotary kStyle>
__global__ void rotary_write_kv_kernel(T* qkv, int64_t tokens, int64_t cols, int heads,
                                       int kv_heads, int hd, const float* __restrict__ cos_sin,
                                       int rot, const int32_t* __restrict__ slots, C* kc, C* vc,
                                       int64_t num_blocks, int bs, int* err) {
  pdl_wait();
  pdl_launch_dependents();
  const int half = rot / 2, pairs = hd / 2;
  const int all_heads = heads + 2 * kv_heads;
  const int items = all_heads * pairs;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y) {
    const int32_t slot = slots[t];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
      const int h = i / pairs, p = i - h * pairs;
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
        float r0, r1;
        rotate(to_f(y0), to_f(y1), c, s, r0, r1);
        y0 = from_f<T>(r0);
        y1 = from_f<T>(r1);
        v[i0] = y0;
        v[i1] = y1;
      }
      if (h < heads || slot < 0) continue;
      if (slot >= num_blocks * bs) {
        if (p == 0) report(err, kErrKvSlot);
        continue;
      }
      const bool is_k = h < heads + kv_heads;
      const int kvh = is_k ? h - heads : h - heads - kv_heads;
      const int64_t base = ((slot / bs * int64_t{kv_heads} + kvh) * bs + slot % bs) * hd;
      C* dst = (is_k ? kc : vc) + base;
      dst[i0] = to_cache<C>(y0);
      dst[i1] = to_cache<C>(y1);
    }
  }
}

// The same pass in 16-byte vectors of kVec elements (head_dim, rot and, for the half
// style, rot / 2 multiples of kVec). One thread per (token, head, vector): for the half
// style a vector of the first rotary half takes its partner vector of the second half
// along (the partner's own thread does nothing); interleaved pairs sit inside one
// vector; vectors past rot (and of v heads) are copied.
template <typename T, typename C, bool kInterleaved>
__global__ void rotary_write_kv_vec_kernel(T* qkv, int64_t tokens, int64_t cols, int heads,
                                           int kv_heads, int hd, const float* __restrict__ cos_sin,
                                           int rot, const int32_t* __restrict__ slots, C* kc, C* vc,
                                           int64_t num_blocks, int bs, int* err) {
  constexpr int kVec = 16 / sizeof(T);
  pdl_wait();
  pdl_launch_dependents();
  const int half = rot / 2, vecs = hd / kVec;
  const int all_heads = heads + 2 * kv_heads;
  const int items = all_heads * vecs;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y) {
    const int32_t slot = slots[t];
    const float* cs = cos_sin + t * rot;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
      const int h = i / vecs, c = i - h * vecs;
      const int e0 = c * kVec;  // first element of this vector
      const bool rotated = h < heads + kv_heads && e0 < rot;
      // Half style: the second half's vectors are done by their partner's thread.
      if (!kInterleaved && rotated && e0 >= half) continue;
      T* v = qkv + t * cols + int64_t{h} * hd;
      uint4 a = *reinterpret_cast<const uint4*>(v + e0), b{};
      const int e1 = e0 + half;  // the partner vector (half style)
      if (rotated) {
        T* ae = reinterpret_cast<T*>(&a);
        if constexpr (kInterleaved) {
#pragma unroll
          for (int j = 0; j < kVec; j += 2) {
            const int p = (e0 + j) / 2;
            float y0, y1;
            rotate(to_f(ae[j]), to_f(ae[j + 1]), cs[p], cs[half + p], y0, y1);
            ae[j] = from_f<T>(y0);
            ae[j + 1] = from_f<T>(y1);
          }
        } else {
          b = *reinterpret_cast<const uint4*>(v + e1);
          T* be = reinterpret_cast<T*>(&b);
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            float y0, y1;
            rotate(to_f(ae[j]), to_f(be[j]), cs[e0 + j], cs[half + e0 + j], y0, y1);
            ae[j] = from_f<T>(y0);
            be[j] = from_f<T>(y1);
          }
          *reinterpret_cast<uint4*>(v + e1) = b;
        }
        *reinterpret_cast<uint4*>(v + e0) = a;
      }
      if (h < heads || slot < 0) continue;
      if (slot >= num_blocks * bs) {
        if (c == 0) report(err, kErrKvSlot);
        continue;
      }
      const bool is_k = h < heads + kv_heads;
      const int kvh = is_k ? h - heads : h - heads - kv_heads;
      C* dst = (is_k ? kc : vc) + ((slot / bs * int64_t{kv_heads} + kvh) * bs + slot % bs) * hd;
      if constexpr (std::is_same_v<C, T>) {
        *reinterpret_cast<uint4*>(dst + e0) = a;
        if (!kInterleaved && rotated) *reinterpret_cast<uint4*>(dst + e1) = b;
      } else {  // 8 bytes of e4m3 per vector
        *reinterpret_cast<uint2*>(dst + e0) = pack_e4m3x8<T>(a);
        if (!kInterleaved && rotated) *reinterpret_cast<uint2*>(dst + e1) = pack_e4m3x8<T>(b);
      }
    }
  }
}

}  // namespace

void launch_rotary_write_kv(void* qkv, DType type, int64_t tokens, int64_t cols, int heads,
                            int kv_heads, int head_dim, const float* cos_sin, int rot,
                            KRotary style, const int32_t* slots, void* k_cache, void* v_cache,
                            bool kv_fp8, int64_t num_blocks, int block_size, int* err,
                            cudaStream_t stream) {
  const int64_t items = int64_t{heads + 2 * kv_heads} * (head_dim / 2);
  if (tokens == 0 || items == 0) return;
  TACHYON_KERNEL_CHECK(items < (int64_t{1} << 30), "rotary_write_kv: too many heads");
  TACHYON_KERNEL_CHECK(!kv_fp8 || type == DType::kBF16 || type == DType::kF16,
                       "rotary_write_kv: an fp8 cache takes f16 or bf16 rows");
  auto run = [&]<typename T, typename C>() {
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = head_dim % kVec == 0 && rot % kVec == 0 &&
                     (style == KRotary::kInterleaved || (rot / 2) % kVec == 0) &&
                     cols % kVec == 0 && reinterpret_cast<uintptr_t>(qkv) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(v_cache) % 16 == 0;
    auto go = [&](auto kernel, int64_t per_token) {
      const dim3 g(ceil_div(per_token, 256),
                   static_cast<unsigned>(std::min<int64_t>(tokens, 65535)));
      launch_kernel(kernel, g, dim3(256), 0, stream, static_cast<T*>(qkv), tokens, cols, heads,
                    kv_heads, head_dim, cos_sin, rot, slots, static_cast<C*>(k_cache),
                    static_cast<C*>(v_cache), num_blocks, block_size, err);
    };
    const int64_t vec_items = int64_t{heads + 2 * kv_heads} * (head_dim / kVec);
    if (vec && style == KRotary::kInterleaved)
      go(rotary_write_kv_vec_kernel<T, C, true>, vec_items);
    else if (vec && style == KRotary::kHalf)
      go(rotary_write_kv_vec_kernel<T, C, false>, vec_items);
    else if (style == KRotary::kInterleaved)
      go(rotary_write_kv_kernel<T, C, KRotary::kInterleaved>, items);
    else if (style == KRotary::kHalf2D)
      go(rotary_write_kv_kernel<T, C, KRotary::kHalf2D>, items);
    else
      go(rotary_write_kv_kernel<T, C, KRotary::kHalf>, items);
  };
  dispatch_kv(type, kv_fp8, run);
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
