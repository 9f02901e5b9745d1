// CudaBackend::lora (backend/ops.h).
#include "backend/cuda/cuda_backend_impl.h"
#include "core/error.h"

namespace tachyon::cuda {

void CudaBackend::lora(const Tensor& x, const LoraStep& step, const LoraTarget& target, Tensor& out,
                       int64_t col_offset) {
  check_lora(x, step, target, out, col_offset);
  raise<Internal>("LoRA adapters on the CUDA backend");
}

}  // namespace tachyon::cuda
