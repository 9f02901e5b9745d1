// Kernels of the CUDA backend's batch-invariant mode (CudaBackendOptions::
// batch_invariant): a row's result must not depend on how many rows share the call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::cuda {

// y[m, n] (row stride ldy, y_type) = x[m, k] · w[n, k]ᵀ, both in `type`, accumulated in
// f32 over k in one fixed order whatever m is (no split-K, one tiling for every shape).
void launch_invariant_matmul(const void* x, const void* w, DType type, int64_t m, int64_t n,
                             int64_t k, void* y, DType y_type, int64_t ldy, cudaStream_t stream);

}  // namespace tachyon::cuda
