// Error checking for CUDA runtime and cuBLAS calls: a failure throws Internal naming
// the call, the place and the error string.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/launch_check.h"
#include "core/error.h"

namespace tachyon::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file,
                                     int line);

// Number of visible CUDA devices (0 when there is no driver or no GPU).
int device_count();

}  // namespace tachyon::cuda

#define TACHYON_CUBLAS_CHECK(expr)                                                 \
  do {                                                                             \
    cublasStatus_t tachyon_st_ = (expr);                                           \
    if (tachyon_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                         \
      ::tachyon::cuda::throw_cublas_error(tachyon_st_, #expr, __FILE__, __LINE__); \
  } while (0)
