// RMSNorm / LayerNorm with the residual add fused in (one block per row, the row kept
// in shared memory as f32), and the per-head q/k norm (one warp per head).
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

constexpr int kNormThreads = 256;

template <typename T>
__global__ void add_norm_kernel(T* residual, const T* delta1, const T* delta2, int64_t d,
                                NormArgs p, T* out) {
  extern __shared__ float row[];  // [d]
  __shared__ float scratch[32];
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

// One warp per (row, head): heads [0, q_heads) use q, [q_heads, q_heads + k_heads) k.
template <typename T>
__global__ void qk_norm_kernel(T* qkv, int64_t rows, int64_t cols, int q_heads, int k_heads, int hd,
                               NormArgs qn, NormArgs kn) {
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
    add_norm_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, smem, stream>>>(
        static_cast<T*>(residual), static_cast<const T*>(delta1), static_cast<const T*>(delta2), d,
        norm, static_cast<T*>(out));
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_qk_norm(void* qkv, DType type, int64_t rows, int64_t cols, int q_heads, int k_heads,
                    int head_dim, const NormArgs& q_norm, const NormArgs& k_norm,
                    cudaStream_t stream) {
  if (rows == 0) return;
  TACHYON_KERNEL_CHECK(head_dim <= 256, "qk_norm: head_dim above 256");
  const int64_t warps = rows * (q_heads + k_heads);
  TACHYON_DISPATCH_FLOAT(type, T, {
    qk_norm_kernel<T><<<ceil_div(warps, 8), 256, 0, stream>>>(
        static_cast<T*>(qkv), rows, cols, q_heads, k_heads, head_dim, q_norm, k_norm);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
