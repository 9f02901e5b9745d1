// Error checks usable from .cu files (which stay free of core/error.h: nvcc cannot
// compile the fmt headers it brings). A failure throws tachyon::Internal (or
// InvalidArgument for kernel_check) from the .cc side.
#pragma once

#include <cuda_runtime.h>

namespace tachyon::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
// A launcher's argument check failed: throws Internal with the message.
[[noreturn]] void throw_kernel_error(const char* message, const char* file, int line);

}  // namespace tachyon::cuda

#define TACHYON_CUDA_CHECK(expr)                                                  \
  do {                                                                            \
    cudaError_t tachyon_err_ = (expr);                                            \
    if (tachyon_err_ != cudaSuccess) [[unlikely]]                                 \
      ::tachyon::cuda::throw_cuda_error(tachyon_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports launch-configuration errors at once.
#define TACHYON_CUDA_LAUNCH_CHECK() TACHYON_CUDA_CHECK(cudaGetLastError())

#define TACHYON_KERNEL_CHECK(cond, message)                             \
  do {                                                                  \
    if (!(cond)) [[unlikely]]                                           \
      ::tachyon::cuda::throw_kernel_error(message, __FILE__, __LINE__); \
  } while (0)
