// L2 prefetch of a weight matrix ahead of its product: each thread hands one 16 KB
// piece to the bulk-copy engine (cp.async.bulk.prefetch.L2), which reads it into L2
// without occupying the SM; the matrix-vector product that follows then reads from L2.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace tachyon::cuda {
namespace {

__host__ __device__ constexpr size_t kPiece() {
  return 16 * 1024;
}

__global__ void prefetch_l2_kernel(const char* p, size_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const size_t pieces = (bytes + kPiece() - 1) / kPiece();
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < pieces;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t off = i * kPiece();
    const uint32_t n = static_cast<uint32_t>(std::min(kPiece(), bytes - off)) & ~15u;
    if (n > 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
  }
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace

void launch_prefetch_l2(const void* p, size_t bytes, cudaStream_t stream) {
  if (bytes < 16) return;
  const size_t pieces = (bytes + kPiece() - 1) / kPiece();
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((pieces + 63) / 64, 1024));
  prefetch_l2_kernel<<<blocks, 64, 0, stream>>>(static_cast<const char*>(p), bytes);
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
