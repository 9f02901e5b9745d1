// The quantized products' kernels (quant_linear.h): the matrix-vector kernel of decode
// steps, which reads each packed weight once and multiplies it on the tensor cores, the
// dequantization into a 16-bit scratch that larger products run the dense GEMM on, and
// the gather of x's columns for act-order matrices.
//
// The matrix-vector kernel gives bands of 16 output rows to persistent blocks of kWarps
// warps, each warp a contiguous share of the band's tiles (a split over k). A lane loads
// kBatch tiles' 16 bytes at a time (the next batch in flight while it multiplies this
// one, across bands too; evict-first: the weights are read once per step), turns each 16-column
// step's 8 values into an mma's A operand with bit operations (int4: the nibble ORed into the
// mantissa of 128.0 (bf16) or 1024.0 (f16) and the zero's same number subtracted, exact;
// int8 on bf16 through f32's 2^23; fp8 converted), and multiplies it with x's rows as
// the B operand (rows past m zero) in an mma.sync m16n8k16 with f32 accumulators. The
// scale is applied once per group to the group's sum; the warps' sums meet in shared
// memory.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/quant_linear.h"

namespace tachyon::cuda {
namespace {

constexpr int kWarps = 8;
// Tiles per lane per batch.
constexpr int kBatch = 4;

template <QuantKind kKind>
constexpr int kTileCols = static_cast<int>(quant_tile_cols(kKind));
template <QuantKind kKind>
constexpr int kSteps = kTileCols<kKind> / 16;

// The subtrahend of step_operand's values for zero z (both halves): the magic number's
// value plus z in T (int4, int8 on f16), or 2^23 + z as f32 bits (int8 on bf16).
template <typename T, QuantKind kKind>
__device__ __forceinline__ uint32_t zero_operand(float z) {
  const uint32_t zi = static_cast<uint32_t>(z);
  if constexpr (kKind == QuantKind::kInt8 && std::is_same_v<T, bf16_t>) {
    return 0x4B000000u | zi;
  } else if constexpr (std::is_same_v<T, bf16_t>) {
    return 0x43004300u | (zi * 0x10001u);
  } else {
    return 0x64006400u | (zi * 0x10001u);
  }
}

template <typename T>
__device__ __forceinline__ uint32_t sub2(uint32_t a, uint32_t b) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    const __nv_bfloat162 r = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                     *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2 r =
        __hsub2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// The e4m3 pair in the low 16 bits (the lower byte first) as a T pair, exactly.
template <typename T>
__device__ __forceinline__ uint32_t fp8_pair(uint32_t two) {
  const __half2_raw r =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
  if constexpr (std::is_same_v<T, bf16_t>) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
    return pack2<bf16_t>(f.x, f.y);
  } else {
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// The A operand of step kStep of a lane's 16 bytes (quant_linear.h's layout): q - z as T
// (exact integers), or the fp8 values. z0: rows g, z1: rows g + 8 (zero_operand's form).
template <typename T, QuantKind kKind, int kStep>
__device__ __forceinline__ void step_operand(const uint4& piece, uint32_t z0, uint32_t z1,
                                             uint32_t (&a)[4]) {
  const uint32_t* wd = reinterpret_cast<const uint32_t*>(&piece);
  if constexpr (kKind == QuantKind::kInt4) {
    const uint32_t w = wd[kStep];
    constexpr uint32_t kMagic = std::is_same_v<T, bf16_t> ? 0x43004300u : 0x64006400u;
#pragma unroll
    for (int r = 0; r < 4; ++r)
      a[r] = sub2<T>(((w >> (4 * r)) & 0x000F000Fu) | kMagic, (r & 1) ? z1 : z0);
  } else if constexpr (kKind == QuantKind::kInt8) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t w = wd[2 * kStep + h];
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // a[2h + r]: bytes 2r, 2r + 1 of w; r = 1: rows g + 8
        const uint32_t z = r ? z1 : z0;
        if constexpr (std::is_same_v<T, bf16_t>) {
          const float zf = __uint_as_float(z);
          const float lo = __uint_as_float(__byte_perm(w, 0x4B00u, 0x5440u | (2 * r))) - zf;
          const float hi = __uint_as_float(__byte_perm(w, 0x4B00u, 0x5440u | (2 * r + 1))) - zf;
          a[2 * h + r] = pack2<bf16_t>(lo, hi);
        } else {
          a[2 * h + r] = sub2<T>(__byte_perm(w, 0x64u, r ? 0x4342u : 0x4140u), z);
        }
      }
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t w = wd[2 * kStep + h];
      a[2 * h] = fp8_pair<T>(w);
      a[2 * h + 1] = fp8_pair<T>(w >> 16);
    }
  }
}

template <typename T, QuantKind kKind, int kStep>
__device__ __forceinline__ void step_mma(const uint4& piece, uint32_t z0, uint32_t z1, uint32_t b0,
                                         uint32_t b1, float (&part)[4]) {
  uint32_t a[4];
  step_operand<T, kKind, kStep>(piece, z0, z1, a);
  mma_16816<T>(part, a, b0, b1);
}

__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

// Persistent blocks, band b = blockIdx.x, += gridDim.x: rows [16b, 16b + 16) of y for
// m <= 8 rows of x. Warp w multiplies tiles [w * share, (w + 1) * share) of each band,
// the next batch of tiles (the next band's first, at a band's end) in flight while it
// multiplies this one; each group's sums (two mma accumulators, alternate steps) are
// scaled into acc at the group's end, its (scale, zero) pairs prefetched into L1 with
// the band's first tiles. Indices within a row are 32-bit (k < 2^31).
template <typename T, QuantKind kKind>
__global__ void __launch_bounds__(kWarps * 32, 2)
    quant_gemv_kernel(const T* __restrict__ x, int m, const uint4* __restrict__ q,
                      const float2* __restrict__ info, void* __restrict__ y, bool y_f32, int n,
                      int k, int gk, int groups, int64_t ldy, bool add) {
  constexpr int TC = kTileCols<kKind>, S = kSteps<kKind>;
  __shared__ float red[2][kWarps][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const int bands = (n + 15) / 16;
  const int tiles = k / TC;
  const int share = (tiles + kWarps - 1) / kWarps;
  const int t_begin = min(tiles, warp * share), t_end = min(tiles, t_begin + share);
  const int spg = gk / 16;  // steps per group
  // The (scale, zero) lines of the warp's groups of band b, into L1.
  auto prefetch_info = [&](int b) {
    if (b >= bands || t_end <= t_begin) return;
    const int g0 = t_begin * S / spg, g1 = (t_end * S - 1) / spg;
    for (int j = g0 + lane; j <= g1; j += 32) prefetch_l1(info + (int64_t{b} * groups + j) * 16);
  };
  auto load = [&](uint4(&v)[kBatch], int b, int t0) {
    const uint4* qb = q + int64_t{b} * tiles * 32 + lane;
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      v[u] =
          b < bands && t0 + u < t_end ? __ldcs(qb + int64_t{t0 + u} * 32) : make_uint4(0, 0, 0, 0);
  };
  int band = blockIdx.x;
  uint4 cur[kBatch];
  load(cur, band, t_begin);  // weights only: before the dependency wait
  prefetch_info(band);
  pdl_wait();
  pdl_launch_dependents();
  const bool has_x = g < m;
  const T* xr = x + int64_t{has_x ? g : 0} * k + 2 * tq;
  // The warp's columns of x, into L1 (64-byte steps: each 16-column step's 32 bytes).
  if (t_end > t_begin)
    for (int j = lane; j < (t_end - t_begin) * S * m; j += 32) {
      const int i = j / ((t_end - t_begin) * S), c = j % ((t_end - t_begin) * S);
      prefetch_l1(x + int64_t{i} * k + t_begin * TC + 16 * c);
    }
  int buf = 0;
  for (; band < bands; band += gridDim.x) {
    const float2* ib = info + int64_t{band} * groups * 16;
    // The group of the warp's first step, and the steps left in it.
    int grp = t_begin * S / spg, left = spg - t_begin * S % spg;
    float2 i0 = make_float2(0.f, 0.f), i1 = i0;
    if (grp < groups) {
      i0 = __ldg(ib + grp * 16 + g);
      i1 = __ldg(ib + grp * 16 + g + 8);
    }
    uint32_t z0 = zero_operand<T, kKind>(i0.y), z1 = zero_operand<T, kKind>(i1.y);
    float acc[4] = {0.f, 0.f, 0.f, 0.f}, part[2][4] = {};
    for (int t0 = t_begin; t0 < t_end; t0 += kBatch) {
      uint4 nxt[kBatch];
      if (t0 + kBatch < t_end) {
        load(nxt, band, t0 + kBatch);
      } else {
        load(nxt, band + gridDim.x, t_begin);
        prefetch_info(band + gridDim.x);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int t = t0 + u;
        if (t >= t_end) break;
#pragma unroll
        for (int s = 0; s < S; ++s) {
          if (left == 0) {  // the group ends: its sums scaled into acc
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[e] = fmaf(part[0][e] + part[1][e], e < 2 ? i0.x : i1.x, acc[e]);
              part[0][e] = part[1][e] = 0.f;
            }
            ++grp;
            left = spg;
            i0 = __ldg(ib + grp * 16 + g);
            i1 = __ldg(ib + grp * 16 + g + 8);
            z0 = zero_operand<T, kKind>(i0.y);
            z1 = zero_operand<T, kKind>(i1.y);
          }
          --left;
          const int col = t * TC + 16 * s;
          uint32_t b0 = 0, b1 = 0;
          if (has_x) {
            b0 = __ldg(reinterpret_cast<const uint32_t*>(xr + col));
            b1 = __ldg(reinterpret_cast<const uint32_t*>(xr + col + 8));
          }
          // The step a compile-time constant (the loop is unrolled).
          float(&p)[4] = part[s & 1];
          if (s == 0) step_mma<T, kKind, 0>(cur[u], z0, z1, b0, b1, p);
          if (s == 1) step_mma<T, kKind, 1 % S>(cur[u], z0, z1, b0, b1, p);
          if (s == 2) step_mma<T, kKind, 2 % S>(cur[u], z0, z1, b0, b1, p);
          if (s == 3) step_mma<T, kKind, 3 % S>(cur[u], z0, z1, b0, b1, p);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) cur[u] = nxt[u];
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[e] = fmaf(part[0][e] + part[1][e], e < 2 ? i0.x : i1.x, acc[e]);
      red[buf][warp][lane][e] = acc[e];
    }
    // One barrier a band: red is double-buffered, and a band's readers pass the next
    // band's barrier before its buffer is written again.
    __syncthreads();
    if (threadIdx.x < 128) {
      // Thread i: element e = i % 4 of lane i / 4's accumulators (row g + 8 (e >> 1), x
      // row 2t + (e & 1)).
      const int l = threadIdx.x >> 2, e = threadIdx.x & 3;
      const int row = band * 16 + (l >> 2) + 8 * (e >> 1), i = 2 * (l & 3) + (e & 1);
      if (row < n && i < m) {
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v += red[buf][w][l][e];
        if (y_f32) {
          float& out = static_cast<float*>(y)[int64_t{i} * ldy + row];
          out = add ? out + v : v;
        } else {
          T& out = static_cast<T*>(y)[int64_t{i} * ldy + row];
          out = from_f<T>(add ? to_f(out) + v : v);
        }
      }
    }
    buf ^= 1;
  }
}

// The stored value v (0..7) of step s of a lane's 16 bytes, as a float (integers: q).
template <QuantKind kKind>
__device__ __forceinline__ float stored_value(const uint4& piece, int s, int v) {
  const uint32_t* wd = reinterpret_cast<const uint32_t*>(&piece);
  if constexpr (kKind == QuantKind::kInt4) {
    const int pos = (v >> 1) + 4 * (v & 1);
    return static_cast<float>((wd[s] >> (4 * pos)) & 0xFu);
  } else {
    const uint32_t byte = (wd[2 * s + (v >> 2)] >> (8 * (v & 3))) & 0xFFu;
    if constexpr (kKind == QuantKind::kInt8) {
      return static_cast<float>(byte);
    } else {
      const __half_raw h =
          __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte), __NV_E4M3);
      return __half2float(*reinterpret_cast<const __half*>(&h));
    }
  }
}

// One warp per tile of rows [r0, r1) (r0 a multiple of 16): its weights, (q - z) * s, to
// out. Block (x: kWarps tiles of a band, y: band of the range).
template <typename T, QuantKind kKind>
__global__ void quant_dequant_kernel(const uint4* __restrict__ q, const float2* __restrict__ info,
                                     int r0, int r1, int k, int gk, int groups,
                                     T* __restrict__ out) {
  constexpr int TC = kTileCols<kKind>, S = kSteps<kKind>;
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int tiles = k / TC;
  const int t = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (t >= tiles) return;
  const int band = r0 / 16 + blockIdx.y;
  const uint4 piece = __ldcs(q + (int64_t{band} * tiles + t) * 32 + lane);
  const int g = lane >> 2, tq = lane & 3;
  const float2* ib = info + int64_t{band} * groups * 16;
#pragma unroll
  for (int s = 0; s < S; ++s) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // rows g, g + 8
      const int row = band * 16 + g + 8 * half;
      if (row >= r1) continue;
#pragma unroll
      for (int c8 = 0; c8 < 2; ++c8) {  // columns 2t.., 2t + 8..
        const int col = t * TC + 16 * s + 2 * tq + 8 * c8;
        const float2 sz = __ldg(ib + (col / gk) * 16 + g + 8 * half);
        const int v = 2 * half + 4 * c8;
        const float lo = (stored_value<kKind>(piece, s, v) - sz.y) * sz.x;
        const float hi = (stored_value<kKind>(piece, s, v + 1) - sz.y) * sz.x;
        *reinterpret_cast<uint32_t*>(out + int64_t{row - r0} * k + col) = pack2<T>(lo, hi);
      }
    }
  }
}

__global__ void gather_cols_kernel(const uint16_t* __restrict__ x, const int32_t* __restrict__ perm,
                                   int64_t m, int64_t k, uint16_t* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= m * k) return;
  const int64_t r = i / k, j = i % k;
  out[i] = x[r * k + __ldg(perm + j)];
}

// Blocks of `kernel` resident at once on the device.
template <typename K>
int resident_blocks(K kernel) {
  int dev = 0, sms = 0, per_sm = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&dev));
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  TACHYON_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, 0));
  return std::max(1, sms * per_sm);
}

template <typename T, QuantKind kKind>
void gemv_launch(const QuantArgs& w, const void* x, int64_t m, void* y, bool y_f32, int64_t ldy,
                 bool add, cudaStream_t stream) {
  auto kernel = quant_gemv_kernel<T, kKind>;
  static const int resident = resident_blocks(kernel);
  const int64_t bands = (w.n + kQuantTileRows - 1) / kQuantTileRows;
  launch_kernel(kernel, dim3(static_cast<unsigned>(std::min<int64_t>(bands, resident))),
                dim3(kWarps * 32), 0, stream, static_cast<const T*>(x), static_cast<int>(m),
                reinterpret_cast<const uint4*>(w.q), reinterpret_cast<const float2*>(w.info), y,
                y_f32, static_cast<int>(w.n), static_cast<int>(w.k), static_cast<int>(w.gk),
                static_cast<int>(w.groups), ldy, add);
}

template <typename T>
void gemv_t(const QuantArgs& w, const void* x, int64_t m, void* y, bool y_f32, int64_t ldy,
            bool add, cudaStream_t stream) {
  switch (w.kind) {
    case QuantKind::kInt4:
      return gemv_launch<T, QuantKind::kInt4>(w, x, m, y, y_f32, ldy, add, stream);
    case QuantKind::kInt8:
      return gemv_launch<T, QuantKind::kInt8>(w, x, m, y, y_f32, ldy, add, stream);
    case QuantKind::kFp8:
      return gemv_launch<T, QuantKind::kFp8>(w, x, m, y, y_f32, ldy, add, stream);
  }
}

template <typename T, QuantKind kKind>
void dequant_k(const QuantArgs& w, int64_t r0, int64_t r1, void* out, cudaStream_t stream) {
  if (r1 <= r0) return;
  const int64_t tiles = w.k / kTileCols<kKind>;
  const int64_t bands = (r1 - r0 + kQuantTileRows - 1) / kQuantTileRows;
  launch_kernel(
      quant_dequant_kernel<T, kKind>,
      dim3(static_cast<unsigned>((tiles + kWarps - 1) / kWarps), static_cast<unsigned>(bands)),
      dim3(kWarps * 32), 0, stream, reinterpret_cast<const uint4*>(w.q),
      reinterpret_cast<const float2*>(w.info), static_cast<int>(r0), static_cast<int>(r1),
      static_cast<int>(w.k), static_cast<int>(w.gk), static_cast<int>(w.groups),
      static_cast<T*>(out));
}

template <typename T>
void dequant_t(const QuantArgs& w, int64_t r0, int64_t r1, void* out, cudaStream_t stream) {
  switch (w.kind) {
    case QuantKind::kInt4:
      return dequant_k<T, QuantKind::kInt4>(w, r0, r1, out, stream);
    case QuantKind::kInt8:
      return dequant_k<T, QuantKind::kInt8>(w, r0, r1, out, stream);
    case QuantKind::kFp8:
      return dequant_k<T, QuantKind::kFp8>(w, r0, r1, out, stream);
  }
}

}  // namespace

void launch_quant_gemv(const QuantArgs& w, const void* x, DType x_type, int64_t m, void* y,
                       bool y_f32, int64_t ldy, bool add, cudaStream_t stream) {
  TACHYON_KERNEL_CHECK(
      m >= 1 && m <= kQuantGemvMaxRows && w.n < (int64_t{1} << 31) && w.k < (int64_t{1} << 31),
      "quantized gemv: 1 to kQuantGemvMaxRows rows, n and k below 2^31");
  TACHYON_KERNEL_CHECK(x_type == DType::kBF16 || x_type == DType::kF16,
                       "quantized gemv: bf16 or f16 activations");
  if (x_type == DType::kBF16)
    gemv_t<bf16_t>(w, x, m, y, y_f32, ldy, add, stream);
  else
    gemv_t<f16_t>(w, x, m, y, y_f32, ldy, add, stream);
}

void launch_quant_dequant(const QuantArgs& w, int64_t r0, int64_t r1, void* out, DType type,
                          cudaStream_t stream) {
  TACHYON_KERNEL_CHECK(type == DType::kBF16 || type == DType::kF16,
                       "quantized dequantization: into bf16 or f16");
  TACHYON_KERNEL_CHECK(r0 % kQuantTileRows == 0 && r0 <= r1 && r1 <= w.n,
                       "quantized dequantization: rows from a whole band");
  if (type == DType::kBF16)
    dequant_t<bf16_t>(w, r0, r1, out, stream);
  else
    dequant_t<f16_t>(w, r0, r1, out, stream);
}

void launch_gather_cols(const void* x, const int32_t* perm, int64_t m, int64_t k, void* out,
                        cudaStream_t stream) {
  const int64_t total = m * k;
  if (total == 0) return;
  launch_kernel(gather_cols_kernel, dim3(static_cast<unsigned>((total + 255) / 256)), dim3(256), 0,
                stream, static_cast<const uint16_t*>(x), perm, m, k, static_cast<uint16_t*>(out));
}

}  // namespace tachyon::cuda
