// Elementwise dtype conversion (weights at load time, test inputs).
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_f<D>(to_f(src[i]));
}

}  // namespace

void launch_convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n,
                    cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 65536));
  TACHYON_DISPATCH_FLOAT(src_type, S, TACHYON_DISPATCH_FLOAT(dst_type, D, {
                           convert_kernel<S, D><<<blocks, 256, 0, stream>>>(
                               static_cast<const S*>(src), static_cast<D*>(dst), n);
                         }));
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
