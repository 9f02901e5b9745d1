// RMSNorm / LayerNorm with the residual add fused in (one block per row, the row kept
// in registers or shared memory as f32; 16-byte loads and stores when the row allows;
// one warp a row for prefill-sized batches), and the per-head q/k norm (one warp per
// head).
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {
namespace {

constexpr int kNormThreads = 256;
// From this many rows on, add_norm runs a warp a row (add_norm_warp_kernel).
constexpr int64_t kNormWarpRowsMin = 512;

// The elements of one 16-byte load: kVec of T.
template <typename T, int kVec>
struct alignas(16) Piece {
  static_assert(kVec * sizeof(T) == 16, "a piece is one 16-byte vector");
  T e[kVec];
};

template <typename T, int kVec>
__device__ __forceinline__ Piece<T, kVec> load_piece(const T* p) {
  Piece<T, kVec> v;
  *reinterpret_cast<uint4*>(v.e) = *reinterpret_cast<const uint4*>(p);
  return v;
}

template <typename T, int kVec>
__device__ __forceinline__ void store_piece(T* p, const Piece<T, kVec>& v) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v.e);
}

// Rows whose width or alignment rules out 16-byte loads: one element at a time, the row
// kept in shared memory as f32.
template <typename T>
__global__ void add_norm_kernel(T* residual, const T* delta1, const T* delta2, int64_t d,
                                NormArgs p, T* out) {
  extern __shared__ float row[];  // [d]
  __shared__ float scratch[32];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  T* res = residual + r * d;
  const bool add = delta1 != nullptr || delta2 != nullptr;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = to_f(res[i]);
    if (add) {
      if (delta1 != nullptr) v += to_f(delta1[r * d + i]);
      if (delta2 != nullptr) v += to_f(delta2[r * d + i]);
      v = round_to<T>(v);  // the residual stream is stored in T
      res[i] = from_f<T>(v);
    }
    row[i] = v;
    sum += v;
  }
  float mean = 0.f;
  float sq = 0.f;
  if (p.type == KNorm::kLayerNorm) {
    mean = block_sum(sum, scratch) / static_cast<float>(d);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float c = row[i] - mean;
      sq += c * c;
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sq += row[i] * row[i];
  }
  const float inv = rsqrtf(block_sum(sq, scratch) / static_cast<float>(d) + p.eps);
  T* o = out + r * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = (row[i] - mean) * inv * (p.weight_offset + p.weight[i]);
    if (p.bias != nullptr) v += p.bias[i];
    o[i] = from_f<T>(v);
  }
}

// The same op with the row in registers: kPer vectors of kVec elements per thread
// (blockDim.x * kPer * kVec >= d), no shared-memory copy of the row; the short
// dependency chain matters for decode steps of a few rows.
// The norm's weight and bias (model parameters, which no kernel writes) are read before
// pdl_wait(), so their latency overlaps the previous kernel's tail.
template <typename T, int kVec, int kPer>
__global__ void add_norm_reg_kernel(T* residual, const T* delta1, const T* delta2, int64_t d,
                                    NormArgs p, T* out) {
  __shared__ float scratch[32];
  const int vecs = static_cast<int>(d / kVec);
  float wt[kPer][kVec], bs[kPer][kVec];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int vi = threadIdx.x + u * blockDim.x;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int64_t i = int64_t{vi} * kVec + j;
      wt[u][j] = vi < vecs ? p.weight_offset + __ldg(p.weight + i) : 0.f;
      bs[u][j] = vi < vecs && p.bias != nullptr ? __ldg(p.bias + i) : 0.f;
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  T* res = residual + r * d;
  const bool add = delta1 != nullptr || delta2 != nullptr;
  float f[kPer][kVec];
  float sum = 0.f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int vi = threadIdx.x + u * blockDim.x;
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[u][j] = 0.f;
    if (vi >= vecs) continue;
    const int64_t i = int64_t{vi} * kVec;
    Piece<T, kVec> v = load_piece<T, kVec>(res + i);
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[u][j] = to_f(v.e[j]);
    if (add) {
      if (delta1 != nullptr) {
        const Piece<T, kVec> a = load_piece<T, kVec>(delta1 + r * d + i);
#pragma unroll
        for (int j = 0; j < kVec; ++j) f[u][j] += to_f(a.e[j]);
      }
      if (delta2 != nullptr) {
        const Piece<T, kVec> b = load_piece<T, kVec>(delta2 + r * d + i);
#pragma unroll
        for (int j = 0; j < kVec; ++j) f[u][j] += to_f(b.e[j]);
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        v.e[j] = from_f<T>(f[u][j]);  // the residual stream is stored in T
        f[u][j] = to_f(v.e[j]);
      }
      store_piece<T, kVec>(res + i, v);
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum += f[u][j];
  }
  float mean = 0.f;
  if (p.type == KNorm::kLayerNorm) mean = block_sum(sum, scratch) / static_cast<float>(d);
  float sq = 0.f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    if (static_cast<int>(threadIdx.x) + u * static_cast<int>(blockDim.x) >= vecs) continue;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float c = f[u][j] - mean;
      sq += c * c;
    }
  }
  const float inv = rsqrtf(block_sum(sq, scratch) / static_cast<float>(d) + p.eps);
  T* o = out + r * d;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int vi = threadIdx.x + u * blockDim.x;
    if (vi >= vecs) continue;
    const int64_t i = int64_t{vi} * kVec;
    Piece<T, kVec> v;
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.e[j] = from_f<T>((f[u][j] - mean) * inv * wt[u][j] + bs[u][j]);
    store_piece<T, kVec>(o + i, v);
  }
}

// Many rows (prefill): one warp a row, no barrier. The block-per-row kernel above goes
// through two block reductions between its loads and its stores, so a resident block
// has nothing in flight while it reduces, and each block reads the norm's weights again
// beside its one row: at 8192 rows x 4096 it moved 2.1-2.5 TB/s. Here each lane loads
// all its pieces of the row and of the deltas (kPer 16-byte pieces each) before it uses
// any, the warp reduces with shuffles, and the weights come through the L1 shared by
// the block's warps. kPer * 32 * kVec >= d. The sums run in another order than the
// block kernels' (float rounding differs, not the arithmetic).
template <typename T, int kVec, int kPer, bool kTwo>
__global__ void __launch_bounds__(128)
    add_norm_warp_kernel(T* residual, const T* delta1, const T* delta2, int64_t rows, int64_t d,
                         NormArgs p, T* out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x & 31;
  const int vecs = static_cast<int>(d / kVec);
  T* res = residual + r * d;
  // The row stays in T (the residual stream is stored in T, so nothing is lost): half
  // the registers of f32, which lets a lane hold 16 pieces and the deltas' beside them.
  Piece<T, kVec> v[kPer], a[kPer], b[kTwo ? kPer : 1];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int64_t i = int64_t{lane + 32 * u} * kVec;
    if (lane + 32 * u >= vecs) continue;
    v[u] = load_piece<T, kVec>(res + i);
    if (delta1 != nullptr) a[u] = load_piece<T, kVec>(delta1 + r * d + i);
    if constexpr (kTwo) b[u] = load_piece<T, kVec>(delta2 + r * d + i);
  }
  if (delta1 != nullptr) {
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      if (lane + 32 * u >= vecs) continue;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float x = to_f(v[u].e[j]) + to_f(a[u].e[j]);
        if constexpr (kTwo) x += to_f(b[u].e[j]);
        v[u].e[j] = from_f<T>(x);
      }
      store_piece<T, kVec>(res + int64_t{lane + 32 * u} * kVec, v[u]);
    }
  }
  float mean = 0.f;
  if (p.type == KNorm::kLayerNorm) {
    float sum = 0.f;
#pragma unroll
    for (int u = 0; u < kPer; ++u)
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += lane + 32 * u < vecs ? to_f(v[u].e[j]) : 0.f;
    mean = warp_sum(sum) / static_cast<float>(d);
  }
  float sq = 0.f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    if (lane + 32 * u >= vecs) continue;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float c = to_f(v[u].e[j]) - mean;
      sq += c * c;
    }
  }
  const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(d) + p.eps);
  T* o = out + r * d;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int vi = lane + 32 * u;
    if (vi >= vecs) continue;
    const int64_t i = int64_t{vi} * kVec;
    const float4* w4 = reinterpret_cast<const float4*>(p.weight + i);
    const float4* b4 = p.bias != nullptr ? reinterpret_cast<const float4*>(p.bias + i) : nullptr;
    Piece<T, kVec> y;
#pragma unroll
    for (int j = 0; j < kVec; j += 4) {
      const float4 w = __ldg(w4 + j / 4);
      const float4 bb = b4 != nullptr ? __ldg(b4 + j / 4) : make_float4(0.f, 0.f, 0.f, 0.f);
      const float ws[4] = {w.x, w.y, w.z, w.w}, bs[4] = {bb.x, bb.y, bb.z, bb.w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
        y.e[j + q] =
            from_f<T>((to_f(v[u].e[j + q]) - mean) * inv * (p.weight_offset + ws[q]) + bs[q]);
    }
    store_piece<T, kVec>(o + i, y);
  }
}

// One warp per (row, head): heads [0, q_heads) use q, [q_heads, q_heads + k_heads) k.
template <typename T>
__global__ void qk_norm_kernel(T* qkv, int64_t rows, int64_t cols, int q_heads, int k_heads, int hd,
                               NormArgs qn, NormArgs kn) {
  pdl_wait();
  pdl_launch_dependents();
  const int heads = q_heads + k_heads;
  const int64_t w = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (w >= rows * heads) return;
  const int64_t r = w / heads;
  const int h = static_cast<int>(w % heads);
  const NormArgs& p = h < q_heads ? qn : kn;
  T* v = qkv + r * cols + int64_t{h} * hd;
  float vals[8];  // head_dim <= 256
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int i = lane + 32 * j;
    vals[j] = i < hd ? to_f(v[i]) : 0.f;
    sum += vals[j];
  }
  float mean = 0.f;
  if (p.type == KNorm::kLayerNorm) mean = warp_sum(sum) / static_cast<float>(hd);
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int i = lane + 32 * j;
    const float c = i < hd ? vals[j] - mean : 0.f;
    sq += c * c;
  }
  const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(hd) + p.eps);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int i = lane + 32 * j;
    if (i < hd) {
      float o = (vals[j] - mean) * inv * (p.weight_offset + p.weight[i]);
      if (p.bias != nullptr) o += p.bias[i];
      v[i] = from_f<T>(o);
    }
  }
}

}  // namespace

void launch_add_norm(void* residual, const void* delta1, const void* delta2, DType type,
                     int64_t rows, int64_t d, const NormArgs& norm, void* out,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const size_t smem = static_cast<size_t>(d) * sizeof(float);
  TACHYON_KERNEL_CHECK(smem <= 48 * 1024, "add_norm: hidden size above 12288");
  TACHYON_DISPATCH_FLOAT(type, T, {
    constexpr int kVec = 16 / sizeof(T);
    bool vec = d % kVec == 0;
    for (const void* ptr :
         {static_cast<const void*>(residual), delta1, delta2, static_cast<const void*>(out)})
      vec = vec && reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
    const dim3 grid(static_cast<unsigned>(rows));
    auto go = [&](auto kernel, unsigned threads, size_t shared) {
      launch_kernel(kernel, grid, dim3(threads), shared, stream, static_cast<T*>(residual),
                    static_cast<const T*>(delta1), static_cast<const T*>(delta2), d, norm,
                    static_cast<T*>(out));
    };
    const int64_t vecs = d / kVec;
    // Many rows: a warp a row (rows of at most 16 pieces a lane, weights 16-byte aligned).
    const bool w_aligned = reinterpret_cast<uintptr_t>(norm.weight) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(norm.bias) % 16 == 0;
    // With two deltas a lane holds at most 8 pieces (16 spill in bf16).
    const bool two = delta1 != nullptr && delta2 != nullptr;
    if (vec && w_aligned && rows >= kNormWarpRowsMin && vecs <= 32 * (two ? 8 : 16)) {
      const dim3 wgrid(static_cast<unsigned>(ceil_div(rows, int64_t{4})));
      // The kernel takes its one delta as delta1, and both only when kTwo.
      const void* d1 = delta1 != nullptr ? delta1 : delta2;
      const void* d2 = two ? delta2 : nullptr;
      auto wgo = [&](auto kernel) {
        launch_kernel(kernel, wgrid, dim3(128), 0, stream, static_cast<T*>(residual),
                      static_cast<const T*>(d1), static_cast<const T*>(d2), rows, d, norm,
                      static_cast<T*>(out));
      };
      auto pick = [&](auto tag) {
        constexpr bool kTwo = decltype(tag)::value;
        if (vecs <= 32)
          wgo(add_norm_warp_kernel<T, kVec, 1, kTwo>);
        else if (vecs <= 64)
          wgo(add_norm_warp_kernel<T, kVec, 2, kTwo>);
        else if (vecs <= 128)
          wgo(add_norm_warp_kernel<T, kVec, 4, kTwo>);
        else if (vecs <= 256)
          wgo(add_norm_warp_kernel<T, kVec, 8, kTwo>);
        else if constexpr (!kTwo)
          wgo(add_norm_warp_kernel<T, kVec, 16, false>);
      };
      if (two)
        pick(std::true_type{});
      else
        pick(std::false_type{});
      return;
    }
    // Registers: up to 1024 threads of 1, 2 or 4 vectors each (d <= 12288 keeps vecs
    // <= 3072). Unaligned rows or widths take the shared-memory kernel one element at a
    // time.
    const int per = vecs <= 1024 ? 1 : vecs <= 2048 ? 2 : 4;
    const unsigned threads =
        static_cast<unsigned>(std::min<int64_t>(1024, (ceil_div(vecs, per) + 31) / 32 * 32));
    if (vec) {
      if (per == 1)
        go(add_norm_reg_kernel<T, kVec, 1>, threads, 0);
      else if (per == 2)
        go(add_norm_reg_kernel<T, kVec, 2>, threads, 0);
      else
        go(add_norm_reg_kernel<T, kVec, 4>, threads, 0);
    } else {
      go(add_norm_kernel<T>, kNormThreads, smem);
    }
  });
}

void launch_qk_norm(void* qkv, DType type, int64_t rows, int64_t cols, int q_heads, int k_heads,
                    int head_dim, const NormArgs& q_norm, const NormArgs& k_norm,
                    cudaStream_t stream) {
  if (rows == 0) return;
  TACHYON_KERNEL_CHECK(head_dim <= 256, "qk_norm: head_dim above 256");
  const int64_t warps = rows * (q_heads + k_heads);
  TACHYON_DISPATCH_FLOAT(type, T, {
    launch_kernel(qk_norm_kernel<T>, dim3(ceil_div(warps, 8)), dim3(256), 0, stream,
                  static_cast<T*>(qkv), rows, cols, q_heads, k_heads, head_dim, q_norm, k_norm);
  });
}

}  // namespace tachyon::cuda

namespace tachyon::cuda {
namespace {

// out[r, c] = w[r, c] * (offset + scale[c]), rounded to T: a norm's scale folded into
// the columns of the weight that reads its output.
template <typename T>
__global__ void fold_norm_kernel(const T* __restrict__ w, T* __restrict__ out, int64_t total,
                                 int64_t k, const float* __restrict__ scale, float offset) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride)
    out[i] = from_f<T>(to_f(w[i]) * (offset + scale[i % k]));
}

// One warp a row: out[r] = 1 / sqrt(mean(x[r, :]²) + eps), the squares summed in f32
// (kVec > 1: 16-byte pieces, a batch of kUnroll of them in flight a lane; kVec 1: one
// element at a time, for rows whose width or alignment rules out pieces).
template <typename T, int kVec>
__global__ void row_inv_rms_kernel(const T* __restrict__ x, int64_t rows, int64_t d, float eps,
                                   float* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x & 31;
  const T* row = x + r * d;
  float sq = 0.f;
  if constexpr (kVec > 1) {
    constexpr int kUnroll = 4;
    const int64_t vecs = d / kVec;
    for (int64_t v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
      Piece<T, kVec> p[kUnroll] = {};
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (v0 + 32 * u < vecs) p[u] = load_piece<T, kVec>(row + (v0 + 32 * u) * kVec);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float f = to_f(p[u].e[j]);  // (zero past the row's end)
          sq = fmaf(f, f, sq);
        }
    }
  } else {
    for (int64_t i = lane; i < d; i += 32) {
      const float f = to_f(row[i]);
      sq = fmaf(f, f, sq);
    }
  }
  const float total = warp_sum(sq);
  if (lane == 0) out[r] = rsqrtf(total / static_cast<float>(d) + eps);
}

// One thread a row: the parts of its sum of squares added in order.
__global__ void row_inv_rms_parts_kernel(const float* __restrict__ squares, int parts, int64_t rows,
                                         int64_t d, float eps, float* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= rows) return;
  float s = 0.f;
  for (int p = 0; p < parts; ++p) s += squares[p * rows + r];
  out[r] = rsqrtf(s / static_cast<float>(d) + eps);
}

std::atomic<int64_t> g_parts_launches{0};  // launch_row_inv_rms_parts

}  // namespace

void launch_row_inv_rms_parts(const float* squares, int parts, int64_t rows, int64_t d, float eps,
                              float* out, cudaStream_t stream) {
  if (rows == 0) return;
  TACHYON_KERNEL_CHECK(d > 0 && parts > 0, "row_inv_rms_parts: empty rows");
  g_parts_launches.fetch_add(1, std::memory_order_relaxed);
  launch_kernel(row_inv_rms_parts_kernel, dim3(static_cast<unsigned>(ceil_div(rows, int64_t{256}))),
                dim3(256), 0, stream, squares, parts, rows, d, eps, out);
}

int64_t row_inv_rms_parts_launches() {
  return g_parts_launches.load(std::memory_order_relaxed);
}

void launch_row_inv_rms(const void* x, DType type, int64_t rows, int64_t d, float eps, float* out,
                        cudaStream_t stream) {
  if (rows == 0) return;
  TACHYON_KERNEL_CHECK(d > 0, "row_inv_rms: empty rows");
  constexpr int kWarps = 8;
  const dim3 grid(static_cast<unsigned>(ceil_div(rows, int64_t{kWarps})));
  TACHYON_DISPATCH_FLOAT(type, T, {
    constexpr int kVec = 16 / sizeof(T);
    if (d % kVec == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0)
      launch_kernel(row_inv_rms_kernel<T, kVec>, grid, dim3(32 * kWarps), 0, stream,
                    static_cast<const T*>(x), rows, d, eps, out);
    else
      launch_kernel(row_inv_rms_kernel<T, 1>, grid, dim3(32 * kWarps), 0, stream,
                    static_cast<const T*>(x), rows, d, eps, out);
  });
}

void launch_fold_norm(const void* w, void* out, DType type, int64_t rows, int64_t k,
                      const float* scale, float offset, cudaStream_t stream) {
  const int64_t total = rows * k;
  if (total == 0) return;
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(ceil_div(total, int64_t{256}), 65536));
  TACHYON_DISPATCH_FLOAT(type, T, {
    launch_kernel(fold_norm_kernel<T>, dim3(blocks), dim3(256), 0, stream, static_cast<const T*>(w),
                  static_cast<T*>(out), total, k, scale, offset);
  });
}

}  // namespace tachyon::cuda
