// Embedding lookup: one block per token row.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {
namespace {

// Each thread copies up to kPerThread elements of a row, all loads issued before any
// store (a step's few rows are latency-bound: one memory round trip, not one per
// element); grid (tokens, ceil(dim / (threads * kPerThread))).
constexpr int kEmbedThreads = 256;
constexpr int kPerThread = 8;

template <typename S, typename D>
__global__ void embedding_kernel(const S* __restrict__ table, int64_t vocab, int64_t dim,
                                 const int32_t* __restrict__ ids, int32_t id_offset, float scale,
                                 bool accumulate, D* __restrict__ out, int* err) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t t = blockIdx.x;
  const int64_t row = int64_t{ids[t]} + id_offset;
  D* o = out + t * dim;
  const int64_t first = int64_t{blockIdx.y} * kEmbedThreads * kPerThread + threadIdx.x;
  if (row < 0 || row >= vocab) {
    if (threadIdx.x == 0 && blockIdx.y == 0) report(err, kErrEmbeddingId);
    if (!accumulate)
#pragma unroll
      for (int u = 0; u < kPerThread; ++u) {
        const int64_t i = first + int64_t{u} * kEmbedThreads;
        if (i < dim) o[i] = from_f<D>(0.f);
      }
    return;
  }
  const S* src = table + row * dim;
  float e[kPerThread], prev[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t i = first + int64_t{u} * kEmbedThreads;
    e[u] = i < dim ? to_f(src[i]) : 0.f;
    prev[u] = accumulate && i < dim ? to_f(o[i]) : 0.f;
  }
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t i = first + int64_t{u} * kEmbedThreads;
    if (i >= dim) break;
    // The scaled embedding is rounded to the activation dtype before it is added.
    const float v = round_to<D>(scale * e[u]);
    o[i] = from_f<D>(accumulate ? prev[u] + v : v);
  }
}

}  // namespace

void launch_embedding(const void* table, DType table_type, int64_t vocab, int64_t dim,
                      const int32_t* ids, int64_t n, int32_t id_offset, float scale,
                      bool accumulate, void* out, DType out_type, int* err, cudaStream_t stream) {
  if (n == 0 || dim == 0) return;
  TACHYON_DISPATCH_FLOAT(
      table_type, S, TACHYON_DISPATCH_FLOAT(out_type, D, {
        launch_kernel(embedding_kernel<S, D>,
                      dim3(static_cast<unsigned>(n), ceil_div(dim, kEmbedThreads * kPerThread)),
                      dim3(kEmbedThreads), 0, stream, static_cast<const S*>(table), vocab, dim, ids,
                      id_offset, scale, accumulate, static_cast<D*>(out), err);
      }));
}

}  // namespace tachyon::cuda
