// Rotary position embedding over the q and k heads of the fused qkv rows, in place:
// one thread per (token, head, frequency pair).
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

template <typename T, bool kInterleaved>
__global__ void rotary_kernel(T* qkv, int64_t tokens, int64_t cols, int heads, int hd,
                              const float* __restrict__ cos_sin, int rot) {
  const int half = rot / 2;
  const int64_t n = tokens * heads * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int p = static_cast<int>(i % half);
    const int64_t th = i / half;
    const int h = static_cast<int>(th % heads);
    const int64_t t = th / heads;
    const float c = cos_sin[t * rot + p];
    const float s = cos_sin[t * rot + half + p];
    T* v = qkv + t * cols + int64_t{h} * hd;
    const int i0 = kInterleaved ? 2 * p : p;
    const int i1 = kInterleaved ? 2 * p + 1 : p + half;
    const float x0 = to_f(v[i0]), x1 = to_f(v[i1]);
    v[i0] = from_f<T>(x0 * c - x1 * s);
    v[i1] = from_f<T>(x1 * c + x0 * s);
  }
}

}  // namespace

void launch_rotary(void* qkv, DType type, int64_t tokens, int64_t cols, int heads, int head_dim,
                   const float* cos_sin, int rot, KRotary style, cudaStream_t stream) {
  const int64_t n = tokens * heads * (rot / 2);
  if (n == 0 || style == KRotary::kNone) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 65536));
  TACHYON_DISPATCH_FLOAT(type, T, {
    if (style == KRotary::kInterleaved)
      rotary_kernel<T, true><<<blocks, 256, 0, stream>>>(static_cast<T*>(qkv), tokens, cols, heads,
                                                         head_dim, cos_sin, rot);
    else
      rotary_kernel<T, false><<<blocks, 256, 0, stream>>>(static_cast<T*>(qkv), tokens, cols, heads,
                                                          head_dim, cos_sin, rot);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
