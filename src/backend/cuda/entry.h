// The CUDA backend's entry point: the one symbol the rest of tachyon reaches it by.
//
// The `tachyon` binary does not link the CUDA backend; it opens the module
// libtachyon_cuda.so at run time (model/cuda_module.cc) and looks up
// tachyon_cuda_entry(), so that a machine without the CUDA libraries or driver still
// runs it on the CPU. Binaries that link the backend statically (its tests and GPU
// benchmarks) get the same table without opening anything. This header names no CUDA
// type, so the loader includes it in builds for every machine.
#pragma once

#include <memory>

#include "backend/cuda/cuda_backend.h"

namespace tachyon {

// Changed whenever this table or CudaBackendOptions change shape: a module left from
// another build is refused instead of called through a table it does not provide.
inline constexpr int kCudaEntryVersion = 1;

struct CudaEntry {
  int version;
  // Number of visible CUDA devices (0 without a driver or GPU).
  int (*device_count)();
  // make_cuda_backend(): throws Unavailable or InvalidArgument as it does.
  std::unique_ptr<Backend> (*make_backend)(const CudaBackendOptions& options);
};

}  // namespace tachyon

// C linkage: the name dlsym() looks up. Never null.
extern "C" const tachyon::CudaEntry* tachyon_cuda_entry();
