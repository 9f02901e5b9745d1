// Mixture-of-experts routing (one warp per token: softmax, top-k by logit with ties
// to the lower expert id) and the weighted combine of the experts' outputs.
#include <climits>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

constexpr int kMaxTopK = 32;

template <typename T>
__global__ void moe_route_kernel(const T* __restrict__ logits, int64_t tokens, int experts,
                                 int top_k, bool renormalize, int32_t* __restrict__ ids,
                                 float* __restrict__ weights) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (t >= tokens) return;
  const T* row = logits + t * experts;
  float mx = -INFINITY;
  for (int j = lane; j < experts; j += 32) mx = fmaxf(mx, to_f(row[j]));
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j < experts; j += 32) sum += expf(to_f(row[j]) - mx);
  sum = warp_sum(sum);
  int sel[kMaxTopK];
  float val[kMaxTopK];
  float picked = 0.f;
  for (int k = 0; k < top_k; ++k) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int j = lane; j < experts; j += 32) {
      bool taken = false;
      for (int q = 0; q < k; ++q) taken |= sel[q] == j;
      const float v = to_f(row[j]);
      if (!taken && argmax_better(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    warp_argmax(bv, bi);
    sel[k] = bi;
    val[k] = expf(bv - mx) / sum;
    picked += val[k];
  }
  if (lane == 0) {
    for (int k = 0; k < top_k; ++k) {
      ids[t * top_k + k] = sel[k];
      weights[t * top_k + k] = renormalize ? val[k] / picked : val[k];
    }
  }
}

template <typename T>
__global__ void moe_combine_kernel(const T* __restrict__ y, int top_k, int64_t d,
                                   const int32_t* __restrict__ row_of,
                                   const float* __restrict__ weights, bool accumulate, T* out) {
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float acc = accumulate ? to_f(out[t * d + i]) : 0.f;
    for (int k = 0; k < top_k; ++k) {
      const int64_t e = t * top_k + k;
      acc += weights[e] * to_f(y[int64_t{row_of[e]} * d + i]);
    }
    out[t * d + i] = from_f<T>(acc);
  }
}

}  // namespace

void launch_moe_route(const void* logits, DType type, int64_t tokens, int experts, int top_k,
                      bool renormalize, int32_t* ids, float* weights, cudaStream_t stream) {
  if (tokens == 0) return;
  TACHYON_KERNEL_CHECK(top_k > 0 && top_k <= kMaxTopK && top_k <= experts,
                       "moe_route: top_k must be in [1, min(32, experts)]");
  TACHYON_DISPATCH_FLOAT(type, T, {
    moe_route_kernel<T><<<ceil_div(tokens, 4), 128, 0, stream>>>(
        static_cast<const T*>(logits), tokens, experts, top_k, renormalize, ids, weights);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_moe_combine(const void* y, DType type, int64_t tokens, int top_k, int64_t d,
                        const int32_t* row_of, const float* weights, bool accumulate, void* out,
                        cudaStream_t stream) {
  if (tokens == 0) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    moe_combine_kernel<T><<<static_cast<unsigned>(tokens), 256, 0, stream>>>(
        static_cast<const T*>(y), top_k, d, row_of, weights, accumulate, static_cast<T*>(out));
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
