// Matrix-vector products for the few-row GEMMs of decode steps: y[i, :] = x[i, :] . w^T
// for m <= 4 rows. One warp per output column; each lane streams 16-byte pieces of the
// weight row (8 in flight, evict-first loads: the weights are read once per step) and
// multiplies them with the matching pieces of every x row (small, cached); f32
// accumulation, one warp reduction per row at the end. The weight matrix is read once
// at close to the memory bandwidth, where a tiled GEMM at m = 1 wastes most of its
// tile and launch.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 8;

__device__ __forceinline__ void dot8(const uint4& w, const uint4& x, float& acc, bf16_t) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]);
    const float2 b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

__device__ __forceinline__ void dot8(const uint4& w, const uint4& x, float& acc, f16_t) {
  const __half2* wp = reinterpret_cast<const __half2*>(&w);
  const __half2* xp = reinterpret_cast<const __half2*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __half22float2(wp[i]);
    const float2 b = __half22float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

template <typename T, typename Y, int kM>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, Y* __restrict__ y, int64_t n,
                int64_t k, int64_t ldy) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5);
  if (row >= n) return;
  const int64_t pieces = k / 8;
  const uint4* wr = reinterpret_cast<const uint4*>(w + row * k);
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  float acc[kM];
#pragma unroll
  for (int i = 0; i < kM; ++i) acc[i] = 0.f;
  int64_t p = lane;
  for (; p + 32 * (kUnroll - 1) < pieces; p += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(wr + p + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int i = 0; i < kM; ++i) dot8(wv[u], __ldg(xr + i * pieces + p + 32 * u), acc[i], T{});
  }
  for (; p < pieces; p += 32) {
    const uint4 wv = __ldcs(wr + p);
#pragma unroll
    for (int i = 0; i < kM; ++i) dot8(wv, __ldg(xr + i * pieces + p), acc[i], T{});
  }
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    const float v = warp_sum(acc[i]);
    if (lane == 0) y[i * ldy + row] = from_f<Y>(v);
  }
}

template <typename T, typename Y>
void launch_m(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
              cudaStream_t stream) {
  const unsigned blocks = ceil_div(n, kWarpsPerBlock);
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(w);
  auto* yt = static_cast<Y*>(y);
  switch (m) {
    case 1:
      gemv_kernel<T, Y, 1><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(xt, wt, yt, n, k, ldy);
      break;
    case 2:
      gemv_kernel<T, Y, 2><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(xt, wt, yt, n, k, ldy);
      break;
    case 3:
      gemv_kernel<T, Y, 3><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(xt, wt, yt, n, k, ldy);
      break;
    default:
      gemv_kernel<T, Y, 4><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(xt, wt, yt, n, k, ldy);
      break;
  }
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool gemv_supports(DType type, DType y_type, int64_t m, int64_t k, const void* x, const void* w) {
  if (type != DType::kBF16 && type != DType::kF16) return false;
  if (y_type != type && y_type != DType::kF32) return false;
  if (m < 1 || m > kGemvMaxRows || k % 8 != 0) return false;
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void launch_gemv(const void* x, const void* w, DType type, void* y, DType y_type, int64_t m,
                 int64_t n, int64_t k, int64_t ldy, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  TACHYON_KERNEL_CHECK(m <= kGemvMaxRows && k % 8 == 0, "gemv: at most 4 rows, k a multiple of 8");
  if (type == DType::kBF16) {
    if (y_type == DType::kF32)
      launch_m<bf16_t, float>(x, w, y, m, n, k, ldy, stream);
    else
      launch_m<bf16_t, bf16_t>(x, w, y, m, n, k, ldy, stream);
  } else {
    if (y_type == DType::kF32)
      launch_m<f16_t, float>(x, w, y, m, n, k, ldy, stream);
    else
      launch_m<f16_t, f16_t>(x, w, y, m, n, k, ldy, stream);
  }
}

}  // namespace tachyon::cuda
