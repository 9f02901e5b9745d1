// Matrix-vector products for the few-row GEMMs of decode steps: y[i, :] = x[i, :] . w^T
// for m <= 4 rows. Two warps per output column (kSplit, each a share of the row); each
// lane streams 16-byte pieces of the weight row (kUnroll in flight, evict-first loads:
// the weights are read once per step) and multiplies them with the matching pieces of
// every x row (staged in shared memory where it fits, kSmemX); f32 accumulation, a warp
// reduction per row and the split's partial sums met in shared memory. The weight matrix
// is read once at close to the memory bandwidth, where a tiled GEMM at m = 1 wastes most
// of its tile and launch. Products of few waves of resident blocks run on persistent
// blocks (gemv_persistent_kernel).
//
// The weights do not depend on earlier kernels, so each warp issues its first weight
// loads before pdl_wait() (launch.cuh): with programmatic dependent launch they are in
// flight while the previous kernel drains, which hides most of the memory latency at
// the start of every product.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {
namespace {

// Warps per block; with x in shared memory and k >= kWideK, 16 (fewer blocks, so fewer
// copies of a long x staged from the L2: the down projection 31.1 -> 29.8 µs at 4096 x
// 14336, no gain at k = 4096).
constexpr int kWarpsPerBlock = 8, kWideWarps = 16;
constexpr int64_t kWideK = 8192;
// Warps per output column, each taking a contiguous share of the row (partial sums meet
// in shared memory): with one warp per column, n = 4096..8192 leaves the last wave of
// warps short of work or the SMs unevenly loaded; two warps per column measured 4-17%
// faster than one at every Llama-3-8B shape, wide ones included (and faster than four).
constexpr int kSplit = 2;
// Pieces per lane per batch; the next batch is loaded while one is multiplied (8
// measured slower than 4 at every Llama-3-8B shape but the lm_head, by 2%).
constexpr int kUnroll = 4;

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

// kSmemX: x is first copied to shared memory (m * k elements), so that the x pieces
// the warps multiply with come from there rather than through L1 next to the weights.
template <typename T, typename Y, int kM, bool kSmemX, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, Y* __restrict__ y, int64_t n,
                int64_t k, int64_t ldy, bool add) {
  extern __shared__ uint4 xs[];  // [kM * k / 8] when kSmemX
  __shared__ float partial[kWarps][kM];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % kSplit;
  const int64_t row = blockIdx.x * int64_t{kWarps / kSplit} + warp / kSplit;
  const bool valid = row < n;
  const int pieces = static_cast<int>(k / 8);
  // This warp's pieces [p_begin, p_end) of the row, in multiples of 32.
  const int share = (pieces + 32 * kSplit - 1) / (32 * kSplit) * 32;
  const int p_begin = part * share, p_end = min(pieces, p_begin + share);
  const uint4* wr = reinterpret_cast<const uint4*>(w + (valid ? row : 0) * k);
  // The first kUnroll pieces of this lane (weights only) before the dependency wait.
  uint4 wv[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int p = p_begin + lane + 32 * u;
    wv[u] = valid && p < p_end ? __ldcs(wr + p) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();
  pdl_launch_dependents();
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  if constexpr (kSmemX) {
    for (int i = threadIdx.x; i < kM * pieces; i += blockDim.x) xs[i] = __ldg(xr + i);
    __syncthreads();
    xr = xs;
  }
  float acc[kM];
#pragma unroll
  for (int i = 0; i < kM; ++i) acc[i] = 0.f;
  if (valid) {
    int p = p_begin + lane;
    for (;;) {
      // wv holds pieces p, p + 32, ..., p + 32 (kUnroll - 1) (zeros past the share's end).
      const int next = p + 32 * kUnroll;
      uint4 nv[kUnroll];
      const bool more = next < p_end;
      if (more) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int q = next + 32 * u;
          nv[u] = q < p_end ? __ldcs(wr + q) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int q = p + 32 * u;
        if (q < p_end) {
#pragma unroll
          for (int i = 0; i < kM; ++i) {
            const uint4 xv = kSmemX ? xr[i * pieces + q] : __ldg(xr + i * pieces + q);
            dot8(wv[u], xv, acc[i], T{});
          }
        }
      }
      if (!more) break;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = nv[u];
      p = next;
    }
  }
#pragma unroll
  for (int i = 0; i < kM; ++i) acc[i] = warp_sum(acc[i]);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < kM; ++i) partial[warp][i] = acc[i];
  __syncthreads();
  if (part != 0) return;
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    float v = 0.f;
#pragma unroll
    for (int j = 0; j < kSplit; ++j) v += partial[warp + j][i];
    acc[i] = v;
  }
  if (!valid || lane != 0) return;
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    Y& out = y[i * ldy + row];
    out = from_f<Y>(add ? acc[i] + to_f(out) : acc[i]);
  }
}

// Persistent blocks: as many as the device holds at once (or fewer), each looping
// over groups of kWarps / kSplit columns (group g, g + gridDim.x, ...). x is staged once
// per block instead of once per group, and each warp's weight loads run on from one
// group into the next (the next group's first batch is requested while the last batch of
// this one is multiplied), so a block is never retired and relaunched between groups and
// the stream of weight pieces has no gaps at group boundaries. Each group ends with one
// block barrier: the split warps' partial sums meet in shared memory (two buffers, so
// one barrier a group is enough).
template <typename T, typename Y, int kM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_persistent_kernel(const T* __restrict__ x, const T* __restrict__ w, Y* __restrict__ y,
                           int64_t n, int64_t k, int64_t ldy, bool add) {
  extern __shared__ uint4 xs[];  // [kM * k / 8]
  __shared__ float partial[2][kWarps][kM];
  constexpr int kCols = kWarps / kSplit;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % kSplit;
  const int pieces = static_cast<int>(k / 8);
  const int share = (pieces + 32 * kSplit - 1) / (32 * kSplit) * 32;
  const int p_begin = part * share, p_end = min(pieces, p_begin + share);
  // This warp's batches of 32 * kUnroll pieces in each row (the same for every row).
  const int batches = p_end > p_begin ? (p_end - p_begin + 32 * kUnroll - 1) / (32 * kUnroll) : 0;
  const int64_t groups = (n + kCols - 1) / kCols;
  const int64_t stride = gridDim.x;
  auto row_of = [&](int64_t g) { return g * kCols + warp / kSplit; };
  // Batch b of row `row` (zeros past the share's end and for rows past n).
  auto load = [&](uint4(&v)[kUnroll], int64_t row, int b) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + (row < n ? row : 0) * k);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = p_begin + 32 * (b * kUnroll + u) + lane;
      v[u] = row < n && q < p_end ? __ldcs(wr + q) : make_uint4(0, 0, 0, 0);
    }
  };
  int64_t g = blockIdx.x;
  uint4 wv[kUnroll];
  load(wv, row_of(g), 0);  // weights only: before the dependency wait
  pdl_wait();
  pdl_launch_dependents();
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  for (int i = threadIdx.x; i < kM * pieces; i += blockDim.x) xs[i] = __ldg(xr + i);
  __syncthreads();
  int buf = 0;
  for (; g < groups; g += stride) {
    const int64_t row = row_of(g);
    float acc[kM];
#pragma unroll
    for (int i = 0; i < kM; ++i) acc[i] = 0.f;
    for (int b = 0; b < batches; ++b) {
      // The next batch: this row's, or the first of this warp's row in the next group.
      uint4 nv[kUnroll] = {};
      if (b + 1 < batches)
        load(nv, row, b + 1);
      else if (g + stride < groups)
        load(nv, row_of(g + stride), 0);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int q = p_begin + 32 * (b * kUnroll + u) + lane;
        if (q < p_end) {
#pragma unroll
          for (int i = 0; i < kM; ++i) dot8(wv[u], xs[i * pieces + q], acc[i], T{});
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = nv[u];
    }
#pragma unroll
    for (int i = 0; i < kM; ++i) acc[i] = warp_sum(acc[i]);
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < kM; ++i) partial[buf][warp][i] = acc[i];
    __syncthreads();
    if (part == 0 && lane == 0 && row < n) {
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        float v = 0.f;
#pragma unroll
        for (int j = 0; j < kSplit; ++j) v += partial[buf][warp + j][i];
        y[i * ldy + row] = from_f<Y>(add ? v + to_f(y[i * ldy + row]) : v);
      }
    }
    buf ^= 1;
  }
}

// Persistent blocks only for products of at most this many waves of
// resident blocks (measured at batch 1 on the H200: the qkv, o and down projections, 1.5-2.3
// waves, gain 0.3-1.2 µs each; gate_up (11 waves) and the lm_head (48) lose 1-5 µs, where
// the one-group blocks keep more loads in flight than blocks that meet at a barrier after
// every group).
constexpr int64_t kPersistentMaxWaves = 4;

template <typename T, typename Y, bool kSmemX, int kWarps>
void launch_m(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
              bool add, cudaStream_t stream) {
  const dim3 blocks(ceil_div(n, kWarps / kSplit));
  const dim3 threads(kWarps * 32);
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(w);
  auto* yt = static_cast<Y*>(y);
  const size_t smem = kSmemX ? static_cast<size_t>(m * k) * sizeof(T) : 0;
  auto go = [&](auto kernel) {
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    launch_kernel(kernel, blocks, threads, smem, stream, xt, wt, yt, n, k, ldy, add);
  };
  switch (m) {
    case 1:
      go(gemv_kernel<T, Y, 1, kSmemX, kWarps>);
      break;
    case 2:
      go(gemv_kernel<T, Y, 2, kSmemX, kWarps>);
      break;
    case 3:
      go(gemv_kernel<T, Y, 3, kSmemX, kWarps>);
      break;
    default:
      go(gemv_kernel<T, Y, 4, kSmemX, kWarps>);
      break;
  }
}

// Persistent blocks where the groups fit in kPersistentMaxWaves waves, else the
// one-group kernel (x in shared memory either way).
template <typename T, typename Y, int kWarps>
void launch_persistent(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k,
                       int64_t ldy, bool add, cudaStream_t stream) {
  const int64_t groups = ceil_div(n, kWarps / kSplit);
  const dim3 threads(kWarps * 32);
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(w);
  auto* yt = static_cast<Y*>(y);
  const size_t smem = static_cast<size_t>(m * k) * sizeof(T);
  auto go = [&](auto kernel) {
    const void* key = reinterpret_cast<const void*>(kernel);
    allow_dynamic_smem(key, smem);
    const int64_t resident = resident_blocks(key, kWarps * 32, smem);
    if (groups > kPersistentMaxWaves * resident) {
      launch_m<T, Y, true, kWarps>(x, w, y, m, n, k, ldy, add, stream);
      return;
    }
    const dim3 blocks(static_cast<unsigned>(std::min(groups, resident)));
    launch_kernel(kernel, blocks, threads, smem, stream, xt, wt, yt, n, k, ldy, add);
  };
  switch (m) {
    case 1:
      go(gemv_persistent_kernel<T, Y, 1, kWarps>);
      break;
    case 2:
      go(gemv_persistent_kernel<T, Y, 2, kWarps>);
      break;
    case 3:
      go(gemv_persistent_kernel<T, Y, 3, kWarps>);
      break;
    default:
      go(gemv_persistent_kernel<T, Y, 4, kWarps>);
      break;
  }
}

}  // namespace

bool gemv_supports(DType type, DType y_type, int64_t m, int64_t k, const void* x, const void* w) {
  if (type != DType::kBF16 && type != DType::kF16) return false;
  if (y_type != type && y_type != DType::kF32) return false;
  if (m < 1 || m > kGemvMaxRows || k % 8 != 0 || k / 8 > (int64_t{1} << 30)) return false;
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void launch_gemv(const void* x, const void* w, DType type, void* y, DType y_type, int64_t m,
                 int64_t n, int64_t k, int64_t ldy, bool add, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  TACHYON_KERNEL_CHECK(m <= kGemvMaxRows && k % 8 == 0, "gemv: at most 4 rows, k a multiple of 8");
  // x staged in shared memory (when m * k * 2 bytes fit in 64 KB, on persistent blocks
  // where they pay), else read through L1.
  const bool smem_x = m * k * 2 <= 64 * 1024;
  auto go = [&](auto tag_t, auto tag_y) {
    using T = decltype(tag_t);
    using Y = decltype(tag_y);
    if (!smem_x)
      launch_m<T, Y, false, kWarpsPerBlock>(x, w, y, m, n, k, ldy, add, stream);
    else if (k >= kWideK)
      launch_persistent<T, Y, kWideWarps>(x, w, y, m, n, k, ldy, add, stream);
    else
      launch_persistent<T, Y, kWarpsPerBlock>(x, w, y, m, n, k, ldy, add, stream);
  };
  if (type == DType::kBF16) {
    if (y_type == DType::kF32)
      go(bf16_t{}, float{});
    else
      go(bf16_t{}, bf16_t{});
  } else {
    if (y_type == DType::kF32)
      go(f16_t{}, float{});
    else
      go(f16_t{}, f16_t{});
  }
}

}  // namespace tachyon::cuda
