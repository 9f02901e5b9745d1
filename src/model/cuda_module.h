// How the model layer reaches the CUDA backend without linking it: through the table
// tachyon_cuda_entry() returns (backend/cuda/entry.h), either linked into this binary
// (the CUDA tests and GPU benchmarks link the backend statically) or found in the
// module libtachyon_cuda.so, opened on first use: beside the executable, else through
// the dynamic loader's search path (LD_LIBRARY_PATH, the system's library folders).
// Nothing here loads CUDA code until a CUDA device is asked for or probed, so a
// CPU-only run maps no CUDA library.
#pragma once

#include "backend/cuda/entry.h"

namespace tachyon {

// File name of the CUDA backend module.
inline constexpr const char* kCudaModuleName = "libtachyon_cuda.so";

// The table, loading the module on the first call. Throws Unavailable with one line
// naming what is missing ("cuda: cannot load libtachyon_cuda.so: <the loader's
// reason>") when it cannot be reached.
const CudaEntry& cuda_entry();

// The table when CUDA can be used here, nullptr otherwise: without the CUDA driver
// library nothing is loaded; a module that fails to load is reported as a warning.
const CudaEntry* probe_cuda_entry();

}  // namespace tachyon
