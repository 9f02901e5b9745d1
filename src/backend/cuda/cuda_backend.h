// The CUDA implementation of backend/ops.h.
//
// Activations, weights and the paged KV cache are stored in one compute dtype (bf16 by
// default, or f16, or f32 for checking); kernels accumulate in f32 and logits come
// back in f32. Weights are converted and uploaded once by prepare_weight() (in pieces,
// through pinned host memory); per-step device memory comes from a caching allocator,
// so steady-state steps make no cudaMalloc; per-step metadata goes up through a pinned
// ring without waiting for the device. All work runs on one stream owned by the
// backend; the host waits only in download()/to_host()/synchronize() (and once per
// MoE layer, to size the expert groups).
#pragma once

#include <memory>
#include <optional>

#include "backend/ops.h"
#include "core/dtype.h"

namespace tachyon {

struct CudaBackendOptions {
  int device = 0;
  DType dtype = DType::kBF16;  // bf16, f16 or f32
  // Batch-invariant mode: every row's result is independent of the batch it runs in
  // (matrix products through one fixed-order kernel instead of cuBLASLt's shape-tuned
  // choices; attention through the CUDA-core kernel, one query per tile, no key split).
  // Slower. Also switched on by the environment variable TACHYON_BATCH_INVARIANT=1.
  bool batch_invariant = false;
  // The KV cache's element type: the compute dtype (unset), or f8_e4m3 with bf16 or f16
  // compute (half the bytes of a 16-bit cache; keys and values rounded to e4m3, which
  // keeps 3 mantissa bits and saturates at +-448).
  std::optional<DType> kv_dtype;
};

// Throws Unavailable when there is no such CUDA device, InvalidArgument on a dtype the
// backend does not compute in.
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options = {});

// Number of visible CUDA devices (0 without a driver or GPU).
int cuda_device_count();

}  // namespace tachyon
