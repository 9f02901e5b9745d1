// Device helpers shared by the kernels: scalar conversions between the storage dtypes
// (f32, f16, bf16) and f32, dispatch from a runtime DType to a C++ type, warp and
// block reductions, and the activation functions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"
#include "core/dtype.h"

namespace tachyon::cuda {

using bf16_t = __nv_bfloat16;
using f16_t = __half;

__device__ __forceinline__ float to_f(float x) {
  return x;
}
__device__ __forceinline__ float to_f(f16_t x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_f(bf16_t x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ f16_t from_f<f16_t>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ bf16_t from_f<bf16_t>(float x) {
  return __float2bfloat16_rn(x);
}

// The value after a round trip through T (what storing it in T keeps).
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f(from_f<T>(x));
}

// The fp8 (e4m3) KV cache: a cache element type C is the compute type T itself or
// kv_fp8_t, one byte of e4m3 (round to nearest even, saturated to +-448; NaN stays NaN).
using kv_fp8_t = uint8_t;

template <typename C, typename T>
__device__ __forceinline__ C to_cache(T x) {
  if constexpr (std::is_same_v<C, T>)
    return x;
  else
    return static_cast<C>(__nv_cvt_float_to_fp8(to_f(x), __NV_SATFINITE, __NV_E4M3));
}

// 8 elements of T (16 bytes) as 8 e4m3 bytes.
template <typename T>
__device__ __forceinline__ uint2 pack_e4m3x8(const uint4& v) {
  const T* e = reinterpret_cast<const T*>(&v);
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(to_f(e[4 * i]), to_f(e[4 * i + 1])), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(to_f(e[4 * i + 2]), to_f(e[4 * i + 3])), __NV_SATFINITE, __NV_E4M3);
    w[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  return make_uint2(w[0], w[1]);
}

// Two e4m3 bytes (the low one first) as two T packed in 32 bits; exact for f16 and
// bf16 (every e4m3 value is one of theirs).
template <typename T>
__device__ __forceinline__ uint32_t unpack_e4m3x2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  if constexpr (std::is_same_v<T, f16_t>) {
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  } else {
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<const uint32_t*>(&b);
  }
}

// 16 e4m3 bytes as 16 T: elements 0..7 in lo, 8..15 in hi.
template <typename T>
__device__ __forceinline__ void unpack_e4m3x16(const uint4& v, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[2 * i] = unpack_e4m3x2<T>(w[i] & 0xffffu);
    o[2 * i + 1] = unpack_e4m3x2<T>(w[i] >> 16);
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// True when (v, i) ranks before (bv, bi) in an argmax: larger value, then lower index.
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// An online log-sum-exp: (m, sum) is the largest value added and the sum of
// exp(x - m) over the values added; -inf and NaN are left out.
__device__ __forceinline__ void lse_add(float x, float& m, float& sum) {
  if (x == -INFINITY || isnan(x)) return;
  if (x > m) {
    sum = sum * expf(m - x) + 1.f;
    m = x;
  } else {
    sum += expf(x - m);
  }
}

// Merges the online log-sum-exp (m2, sum2) into (m, sum).
__device__ __forceinline__ void lse_merge(float& m, float& sum, float m2, float sum2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    sum = sum2;
  } else if (m2 > m) {
    sum = sum * expf(m - m2) + sum2;
    m = m2;
  } else {
    sum += sum2 * expf(m2 - m);
  }
}

// The warp's best (v, i) by argmax_better, on every lane.
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (argmax_better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// One logit x (index j) of a greedy scan whose indices rise per thread: the running best
// (bv, bi) keeps the first of equals, and bad is set by a NaN or +inf.
__device__ __forceinline__ void greedy_visit(float x, int64_t j, float& bv, int& bi, int& bad) {
  if (isnan(x) || x == INFINITY) bad = 1;
  if (x > bv) {
    bv = x;
    bi = static_cast<int>(j);
  }
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. `scratch` holds 32 floats; the call begins and ends with a barrier so it
// can be used repeatedly with the same scratch.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  __syncthreads();
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  __syncthreads();
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : -INFINITY;
  t = warp_max(t);
  __syncthreads();
  return t;
}

__device__ __forceinline__ float apply_act(float x, KAct act) {
  switch (act) {
    case KAct::kIdentity:
      return x;
    case KAct::kSilu:
      return x / (1.f + expf(-x));
    case KAct::kGelu:
      return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case KAct::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + tanhf(inner));
    }
    case KAct::kRelu:
      return fmaxf(x, 0.f);
    case KAct::kQuickGelu:
      return x / (1.f + expf(-1.702f * x));
  }
  return x;
}

// The split-K handshake where the last block of a group merges the group's partials:
// called by every thread of each block after the block has written its partials, it
// returns true in the block whose arrival completes the count of `blocks` (and resets
// the counter for the next launch; no other block of this launch touches it again).
// The fence before the count orders this block's partials before it; the one after
// orders the last block's reads of the others' partials after every count.
__device__ __forceinline__ bool last_block_arrives(int* counter, int blocks) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1) == blocks - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// One rotary rotation, written out so that every kernel rounds it the same way (the
// rotary pass and the products that rotate in their epilogue must agree bit for bit).
__device__ __forceinline__ void rotate(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  y1 = __fmaf_rn(x1, c, __fmul_rn(x0, s));
}

__device__ __forceinline__ void report(int* flag, int code) {
  if (flag != nullptr) atomicOr(flag, code);
}

inline unsigned ceil_div(int64_t a, int64_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

}  // namespace tachyon::cuda

// Runs the statement with `T` bound to the C++ type of a floating DType.
#define TACHYON_DISPATCH_FLOAT(dtype, T, ...)                                               \
  do {                                                                                      \
    switch (dtype) {                                                                        \
      case ::tachyon::DType::kF32: {                                                        \
        using T = float;                                                                    \
        __VA_ARGS__;                                                                        \
        break;                                                                              \
      }                                                                                     \
      case ::tachyon::DType::kF16: {                                                        \
        using T = ::tachyon::cuda::f16_t;                                                   \
        __VA_ARGS__;                                                                        \
        break;                                                                              \
      }                                                                                     \
      case ::tachyon::DType::kBF16: {                                                       \
        using T = ::tachyon::cuda::bf16_t;                                                  \
        __VA_ARGS__;                                                                        \
        break;                                                                              \
      }                                                                                     \
      default:                                                                              \
        ::tachyon::cuda::throw_kernel_error("CUDA kernels take f32, f16 or bf16", __FILE__, \
                                            __LINE__);                                      \
    }                                                                                       \
  } while (0)

namespace tachyon::cuda {

// Runs f.template operator()<T, C>() for rows of `type` and a KV cache of C: T itself,
// or e4m3 bytes when kv_fp8 (f16 or bf16 rows; the caller checks).
template <typename F>
void dispatch_kv(DType type, bool kv_fp8, F&& f) {
  if (!kv_fp8)
    TACHYON_DISPATCH_FLOAT(type, T, f.template operator()<T, T>());
  else if (type == DType::kBF16)
    f.template operator()<bf16_t, kv_fp8_t>();
  else
    f.template operator()<f16_t, kv_fp8_t>();
}

}  // namespace tachyon::cuda
