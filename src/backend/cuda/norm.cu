// RMSNorm / LayerNorm with the residual add fused in (one block per row, the row kept
// in shared memory as f32; 16-byte loads and stores when the row allows), and the
// per-head q/k norm (one warp per head).
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {
namespace {

constexpr int kNormThreads = 256;

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
