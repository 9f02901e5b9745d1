// Sampling helpers on f32 logits rows: greedy argmax and in-place log-softmax, so that
// only token ids (and the log-probabilities asked for) need to cross to the host.
#include <climits>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/sampling_kernels.h"

namespace tachyon::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void argmax_kernel(const float* __restrict__ logits, int64_t vocab,
                              int32_t* __restrict__ ids) {
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  __shared__ int nan_seen;
  if (threadIdx.x == 0) nan_seen = 0;
  __syncthreads();
  const float* row = logits + blockIdx.x * vocab;
  float bv = -INFINITY;
  int bi = INT_MAX;
  bool nan = false;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = row[j];
    if (isnan(v)) nan = true;
    if (v > bv || (v == bv && j < bi)) {
      bv = v;
      bi = static_cast<int>(j);
    }
  }
  if (nan) atomicOr(&nan_seen, 1);
  warp_argmax(bv, bi);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (argmax_better(sv[w], si[w], bv, bi)) {
        bv = sv[w];
        bi = si[w];
      }
    ids[blockIdx.x] = (nan_seen != 0 || bi == INT_MAX) ? -1 : bi;
  }
}

__global__ void log_softmax_kernel(float* x, int64_t vocab) {
  __shared__ float scratch[32];
  float* row = x + blockIdx.x * vocab;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, scratch);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(row[j] - mx);
  sum = block_sum(sum, scratch);
  const float lse = mx + logf(sum);
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) row[j] -= lse;
}

// One block per row: the log-probability of the row's chosen token (ids[r] >= 0) in the
// distribution it was drawn from, log-softmax(x / T) at the token, T the row's
// temperature (1 when greedy or without meta); 0 for rows without a token. The row
// already holds its adjustments (launch_sample applied them in place). One pass: each
// thread keeps an online (max, sum of exp(y - max)) over its share of y = x / T, read a
// float4 at a time where the row allows, and the block merges them.
constexpr int kLogprobThreads = 1024;

__global__ void __launch_bounds__(kLogprobThreads)
    chosen_logprob_kernel(const float* __restrict__ logits, int64_t vocab,
                          const KSampleRow* __restrict__ meta, const int32_t* __restrict__ ids,
                          float* __restrict__ logprobs) {
  __shared__ float red_m[kLogprobThreads / 32], red_s[kLogprobThreads / 32];
  const int32_t id = ids[blockIdx.x];
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0) logprobs[blockIdx.x] = 0.f;
    return;
  }
  float inv_t = 1.f;
  if (meta != nullptr && meta[blockIdx.x].greedy == 0) inv_t = 1.f / meta[blockIdx.x].temperature;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float m = -INFINITY, sum = 0.f;
  if (vocab % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < vocab / 4; j += kLogprobThreads) {
      const float4 v = r4[j];
      lse_add(v.x * inv_t, m, sum);
      lse_add(v.y * inv_t, m, sum);
      lse_add(v.z * inv_t, m, sum);
      lse_add(v.w * inv_t, m, sum);
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += kLogprobThreads) lse_add(row[j] * inv_t, m, sum);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, sum, o);
    lse_merge(m, sum, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kLogprobThreads / 32; ++w) lse_merge(m, sum, red_m[w], red_s[w]);
    logprobs[blockIdx.x] = sum > 0.f ? row[id] * inv_t - m - logf(sum) : 0.f;
  }
}

}  // namespace

void launch_chosen_logprob(const float* logits, int64_t rows, int64_t vocab,
                           const KSampleRow* rows_meta, const int32_t* ids, float* logprobs,
                           cudaStream_t stream) {
  if (rows == 0) return;
  chosen_logprob_kernel<<<static_cast<unsigned>(rows), kLogprobThreads, 0, stream>>>(
      logits, vocab, rows_meta, ids, logprobs);
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_argmax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                   cudaStream_t stream) {
  if (rows == 0) return;
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, ids);
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_log_softmax(float* x, int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return;
  log_softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, vocab);
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
