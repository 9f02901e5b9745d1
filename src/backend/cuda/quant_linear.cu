// The quantized products' kernels (quant_linear.h): the matrix-vector kernel of decode
// steps, which reads each packed weight once and turns it into floats in registers, the
// dequantization into a 16-bit scratch that larger products run the dense GEMM on, and
// the gather of x's columns for act-order matrices.
//
// The matrix-vector kernel gives each output column's row of weights to kSplit warps of
// a persistent block: each lane streams 16-byte pieces of the row (32 int4 or 16 int8 /
// fp8 values, kUnroll in flight, evict-first loads: the weights are read once per step),
// turns each 8-column chunk into floats (byte permutes that place the values in a
// float's mantissa, no conversion instructions) and multiplies them with every x row's
// chunk (read through L1); f32 accumulation, a warp reduction per row and the split's
// partial sums met in shared memory.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/quant_linear.h"

namespace tachyon::cuda {
namespace {

constexpr int kWarps = 8;
// Warps per output column, each a contiguous share of its row of weights.
constexpr int kSplit = 2;
// Pieces per lane per batch.
constexpr int kUnroll = 4;

template <QuantKind kKind>
constexpr int kPieceCols = kKind == QuantKind::kInt4 ? 32 : 16;

// The 8 weights of chunk c (columns 8c..8c+7 of a 16-byte piece) as floats:
// f(q) * g.x + g.y.
template <QuantKind kKind>
__device__ __forceinline__ void dequant_chunk(const uint4& piece, int c, float2 g, float (&w)[8]) {
  const uint32_t* wd = reinterpret_cast<const uint32_t*>(&piece);
  if constexpr (kKind == QuantKind::kInt4) {
    // Byte b of the word holds columns 2b (low nibble) and 2b + 1. Each nibble goes into
    // bits 16..19 under the bits of 1.0f: f = 1 + q / 128, exactly.
    const uint32_t word = wd[c];
    const uint32_t lo = (word & 0x0F0F0F0Fu) | 0x80808080u;
    const uint32_t hi = ((word >> 4) & 0x0F0F0F0Fu) | 0x80808080u;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint32_t sel = 0x5044u | (static_cast<uint32_t>(b) << 8);
      w[2 * b] = fmaf(__uint_as_float(__byte_perm(lo, 0x3F00u, sel)), g.x, g.y);
      w[2 * b + 1] = fmaf(__uint_as_float(__byte_perm(hi, 0x3F00u, sel)), g.x, g.y);
    }
  } else if constexpr (kKind == QuantKind::kInt8) {
    // Each byte under the exponent of 2^23: f = 2^23 + q, exactly; less 2^23, q.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t word = wd[2 * c + h];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float f = __uint_as_float(__byte_perm(word, 0x4B00u, 0x5440u | b)) - 8388608.f;
        w[4 * h + b] = fmaf(f, g.x, g.y);
      }
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t word = wd[2 * c + h];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>(word >> (16 * j)), __NV_E4M3);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
        w[4 * h + 2 * j] = fmaf(f.x, g.x, g.y);
        w[4 * h + 2 * j + 1] = fmaf(f.y, g.x, g.y);
      }
    }
  }
}

__device__ __forceinline__ float2 pair_f(uint32_t v, bf16_t) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}
__device__ __forceinline__ float2 pair_f(uint32_t v, f16_t) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

// The products of one 16-byte piece (columns col0..col0 + V - 1) with kM rows of x.
template <typename T, int kM, QuantKind kKind>
__device__ __forceinline__ void piece_dot(const uint4& piece, int col0, const float2* s,
                                          bool piece_group, int ppg, int gk, const T* x, int k,
                                          int m, float (&acc)[kM]) {
  constexpr int V = kPieceCols<kKind>;
  const float2 pg = piece_group ? __ldg(s + col0 / V / ppg) : make_float2(0.f, 0.f);
#pragma unroll
  for (int c = 0; c < V / 8; ++c) {
    const float2 g = piece_group ? pg : __ldg(s + (col0 + 8 * c) / gk);
    float w[8];
    dequant_chunk<kKind>(piece, c, g, w);
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      if (i >= m) break;
      const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + int64_t{i} * k + col0 + 8 * c));
      const uint32_t* xp = reinterpret_cast<const uint32_t*>(&xv);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 xf = pair_f(xp[e], T{});
        acc[i] = fmaf(w[2 * e], xf.x, acc[i]);
        acc[i] = fmaf(w[2 * e + 1], xf.y, acc[i]);
      }
    }
  }
}

// Persistent blocks (as many as are resident), looping over groups of kCols output
// columns, for m <= kM rows of x and y. kSplit warps share each column's row of
// weights (their partial sums meet in shared memory, double-buffered: one barrier a
// group), so that the work comes in pieces small enough to spread evenly over the SMs;
// each warp requests the next batch of pieces (the next group's first, at the end of a
// row) before it multiplies the current one. Indices within a row are 32-bit (k < 2^31);
// a piece's group is p / (gk / V) where groups hold whole pieces, else each 8-column
// chunk's column / gk.
template <typename T, int kM, QuantKind kKind>
__global__ void __launch_bounds__(kWarps * 32)
    quant_gemv_kernel(const T* __restrict__ x, int m, const uint8_t* __restrict__ q,
                      const float2* __restrict__ sz, void* __restrict__ y, bool y_f32, int n, int k,
                      int gk, int bn, int groups, int64_t ldy, bool add) {
  constexpr int V = kPieceCols<kKind>;
  constexpr int kCols = kWarps / kSplit;
  __shared__ float partial[2][kWarps][kM];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % kSplit;
  const int pieces = k / V;
  const int share = (pieces + 32 * kSplit - 1) / (32 * kSplit) * 32;
  const int p_begin = part * share, p_end = min(pieces, p_begin + share);
  const int batches = p_end > p_begin ? (p_end - p_begin + 32 * kUnroll - 1) / (32 * kUnroll) : 0;
  const int col_groups = (n + kCols - 1) / kCols;
  const bool piece_group = gk % V == 0;
  const int ppg = piece_group ? gk / V : 1;  // pieces per group
  auto col_of = [&](int g) { return g * kCols + warp / kSplit; };
  // Batch b of column j's row (zeros past the share's end and for columns past n).
  auto load = [&](uint4(&v)[kUnroll], int j, int b) {
    const uint4* qr = reinterpret_cast<const uint4*>(q) + int64_t{j < n ? j : 0} * pieces;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p_begin + 32 * (b * kUnroll + u) + lane;
      v[u] = j < n && p < p_end ? __ldcs(qr + p) : make_uint4(0, 0, 0, 0);
    }
  };
  int g = blockIdx.x;
  uint4 wv[kUnroll];
  if (batches > 0) load(wv, col_of(g), 0);  // weights only: before the dependency wait
  pdl_wait();
  pdl_launch_dependents();
  int buf = 0;
  for (; g < col_groups; g += gridDim.x) {
    const int j = col_of(g);
    const float2* s = sz + int64_t{(j < n ? j : 0) / bn} * groups;
    float acc[kM];
#pragma unroll
    for (int i = 0; i < kM; ++i) acc[i] = 0.f;
    for (int b = 0; b < batches; ++b) {
      uint4 nv[kUnroll];
      if (b + 1 < batches)
        load(nv, j, b + 1);
      else
        load(nv, g + gridDim.x < col_groups ? col_of(g + gridDim.x) : n, 0);
      if (j < n) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int p = p_begin + 32 * (b * kUnroll + u) + lane;
          if (p < p_end)
            piece_dot<T, kM, kKind>(wv[u], p * V, s, piece_group, ppg, gk, x, k, m, acc);
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
    if (part == 0 && lane == 0 && j < n) {
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        if (i >= m) break;
        float v = 0.f;
#pragma unroll
        for (int t = 0; t < kSplit; ++t) v += partial[buf][warp + t][i];
        if (y_f32) {
          float& out = static_cast<float*>(y)[int64_t{i} * ldy + j];
          out = add ? out + v : v;
        } else {
          T& out = static_cast<T*>(y)[int64_t{i} * ldy + j];
          out = from_f<T>(add ? to_f(out) + v : v);
        }
      }
    }
    buf ^= 1;
  }
}

// One thread per 16-byte piece of rows [r0, r0 + rows): its V weights to out.
// Block (x: pieces of a row, y: row).
template <typename T, QuantKind kKind>
__global__ void quant_dequant_kernel(const uint8_t* __restrict__ q, const float2* __restrict__ sz,
                                     int r0, int k, int gk, int bn, int groups,
                                     T* __restrict__ out) {
  constexpr int V = kPieceCols<kKind>;
  pdl_wait();
  pdl_launch_dependents();
  const int pieces = k / V;
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= pieces) return;
  const int r = blockIdx.y, row = r0 + r;
  const uint4 piece = __ldcs(reinterpret_cast<const uint4*>(q) + int64_t{row} * pieces + p);
  const float2* s = sz + int64_t{row / bn} * groups;
  T* o = out + int64_t{r} * k + p * V;
#pragma unroll
  for (int c = 0; c < V / 8; ++c) {
    float w[8];
    dequant_chunk<kKind>(piece, c, __ldg(s + (p * V + 8 * c) / gk), w);
    uint4 v;
    uint32_t* vp = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const T a = from_f<T>(w[2 * e]), b = from_f<T>(w[2 * e + 1]);
      vp[e] = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&a)) |
              (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&b)) << 16);
    }
    *reinterpret_cast<uint4*>(o + 8 * c) = v;
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

template <typename T, int kM, QuantKind kKind>
void gemv_launch(const QuantArgs& w, const void* x, int64_t m, void* y, bool y_f32, int64_t ldy,
                 bool add, cudaStream_t stream) {
  auto kernel = quant_gemv_kernel<T, kM, kKind>;
  static const int resident = resident_blocks(kernel);
  const int64_t col_groups = (w.n + kWarps / kSplit - 1) / (kWarps / kSplit);
  const dim3 blocks(static_cast<unsigned>(std::min<int64_t>(col_groups, resident)));
  launch_kernel(kernel, blocks, dim3(kWarps * 32), 0, stream, static_cast<const T*>(x),
                static_cast<int>(m), w.q, reinterpret_cast<const float2*>(w.sz), y, y_f32,
                static_cast<int>(w.n), static_cast<int>(w.k), static_cast<int>(w.gk),
                static_cast<int>(w.bn), static_cast<int>(w.groups), ldy, add);
}

template <typename T, QuantKind kKind>
void gemv_m(const QuantArgs& w, const void* x, int64_t m, void* y, bool y_f32, int64_t ldy,
            bool add, cudaStream_t stream) {
  if (m <= 1)
    gemv_launch<T, 1, kKind>(w, x, m, y, y_f32, ldy, add, stream);
  else if (m <= 2)
    gemv_launch<T, 2, kKind>(w, x, m, y, y_f32, ldy, add, stream);
  else if (m <= 4)
    gemv_launch<T, 4, kKind>(w, x, m, y, y_f32, ldy, add, stream);
  else
    gemv_launch<T, 8, kKind>(w, x, m, y, y_f32, ldy, add, stream);
}

template <typename T>
void gemv_t(const QuantArgs& w, const void* x, int64_t m, void* y, bool y_f32, int64_t ldy,
            bool add, cudaStream_t stream) {
  switch (w.kind) {
    case QuantKind::kInt4:
      return gemv_m<T, QuantKind::kInt4>(w, x, m, y, y_f32, ldy, add, stream);
    case QuantKind::kInt8:
      return gemv_m<T, QuantKind::kInt8>(w, x, m, y, y_f32, ldy, add, stream);
    case QuantKind::kFp8:
      return gemv_m<T, QuantKind::kFp8>(w, x, m, y, y_f32, ldy, add, stream);
  }
}

template <typename T, QuantKind kKind>
void dequant_k(const QuantArgs& w, int64_t r0, int64_t r1, void* out, cudaStream_t stream) {
  const int64_t pieces = w.k / kPieceCols<kKind>;
  if (r1 <= r0) return;
  const int threads = 128;
  launch_kernel(
      quant_dequant_kernel<T, kKind>,
      dim3(static_cast<unsigned>((pieces + threads - 1) / threads), static_cast<unsigned>(r1 - r0)),
      dim3(threads), 0, stream, w.q, reinterpret_cast<const float2*>(w.sz), static_cast<int>(r0),
      static_cast<int>(w.k), static_cast<int>(w.gk), static_cast<int>(w.bn),
      static_cast<int>(w.groups), static_cast<T*>(out));
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
