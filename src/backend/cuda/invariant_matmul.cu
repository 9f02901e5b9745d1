// The batch-invariant matrix product: 64 x 64 output tiles, 16-deep k slices through
// shared memory, each thread 4 x 4 outputs accumulated with fmaf in increasing k. Every
// output element sees the same sequence of operations for any m, so a row's result is
// independent of the other rows of the call (cuBLASLt picks kernels, split-K and
// stream-K decompositions by shape). Correct first; slower than cuBLASLt.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/invariant_kernels.h"

namespace tachyon::cuda {
namespace {

constexpr int kTile = 64;
constexpr int kDepth = 16;

template <typename T, typename Y>
__global__ void __launch_bounds__(256)
    matmul_kernel(const T* __restrict__ x, const T* __restrict__ w, Y* __restrict__ y, int64_t m,
                  int64_t n, int64_t k, int64_t ldy) {
  __shared__ float xs[kDepth][kTile + 1];
  __shared__ float ws[kDepth][kTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t row0 = int64_t{blockIdx.y} * kTile, col0 = int64_t{blockIdx.x} * kTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
    for (int i = threadIdx.x; i < kDepth * kTile; i += 256) {
      const int r = i / kDepth, c = i % kDepth;
      const int64_t kk = k0 + c;
      const int64_t xr = row0 + r, wr = col0 + r;
      xs[c][r] = xr < m && kk < k ? to_f(x[xr * k + kk]) : 0.f;
      ws[c][r] = wr < n && kk < k ? to_f(w[wr * k + kk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kDepth; ++c) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[c][ty + 16 * i];
        b[i] = ws[c][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + ty + 16 * i;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = col0 + tx + 16 * j;
      if (c < n) y[r * ldy + c] = from_f<Y>(acc[i][j]);
    }
  }
}

}  // namespace

void launch_invariant_matmul(const void* x, const void* w, DType type, int64_t m, int64_t n,
                             int64_t k, void* y, DType y_type, int64_t ldy, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  TACHYON_KERNEL_CHECK((m + kTile - 1) / kTile <= 65535, "invariant matmul: too many rows");
  const dim3 grid(ceil_div(n, kTile), ceil_div(m, kTile));
  TACHYON_DISPATCH_FLOAT(type, T, TACHYON_DISPATCH_FLOAT(y_type, Y, {
                           matmul_kernel<T, Y><<<grid, 256, 0, stream>>>(
                               static_cast<const T*>(x), static_cast<const T*>(w),
                               static_cast<Y*>(y), m, n, k, ldy);
                         }));
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
