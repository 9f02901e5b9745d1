// The middle step of prefill attention through batched GEMMs (cuda_ops.cc runs S = Q Kᵀ
// and O = P V on cuBLAS): a causal softmax over the rows of S (f32, already scaled),
// written as P in the storage dtype. Row r of a chunk is query row0 + r of a sequence
// whose keys are its own tokens, so it sees keys [0, row0 + r]; later keys get P = 0.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    causal_softmax_kernel(const float* __restrict__ s, T* __restrict__ p, int cols, int row0,
                          int64_t batch_stride) {
  __shared__ float red[32];
  const int r = blockIdx.x;
  const int64_t base = blockIdx.y * batch_stride + int64_t{r} * cols;
  const float* sr = s + base;
  T* pr = p + base;
  const int limit = min(cols, row0 + r + 1);  // keys [0, limit) are visible
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < limit; c += kThreads) mx = fmaxf(mx, sr[c]);
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int c = threadIdx.x; c < limit; c += kThreads) sum += __expf(sr[c] - mx);
  sum = block_sum(sum, red);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int c = threadIdx.x; c < cols; c += kThreads)
    pr[c] = from_f<T>(c < limit ? __expf(sr[c] - mx) * inv : 0.f);
}

}  // namespace

void launch_causal_softmax(const float* s, void* p, DType type, int rows, int cols, int row0,
                           int batch, int64_t batch_stride, cudaStream_t stream) {
  if (rows == 0 || cols == 0 || batch == 0) return;
  TACHYON_KERNEL_CHECK(batch <= 65535, "causal_softmax: more than 65535 matrices");
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(batch));
  TACHYON_DISPATCH_FLOAT(type, T, {
    causal_softmax_kernel<T>
        <<<grid, kThreads, 0, stream>>>(s, static_cast<T*>(p), cols, row0, batch_stride);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
