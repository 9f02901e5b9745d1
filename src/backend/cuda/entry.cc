#include "backend/cuda/entry.h"

namespace {

std::unique_ptr<tachyon::Backend> make_backend(const tachyon::CudaBackendOptions& options) {
  return tachyon::make_cuda_backend(options);
}

int device_count() {
  return tachyon::cuda_device_count();
}

constexpr tachyon::CudaEntry kEntry{tachyon::kCudaEntryVersion, &device_count, &make_backend};

}  // namespace

extern "C" const tachyon::CudaEntry* tachyon_cuda_entry() {
  return &kEntry;
}
