// The host memory CudaBackend::alloc_swap() pins and maps, registered process-wide so
// that copy_blocks_between() can tell it from other host memory by its own record (asking
// the driver about a pointer depends on the asking thread's context).
#pragma once

#include <cstddef>

namespace tachyon::cuda {

void add_swap_memory(const void* p, size_t bytes);
void remove_swap_memory(const void* p);
// Whether [p, p + bytes) lies within one registered allocation.
bool is_swap_memory(const void* p, size_t bytes);

}  // namespace tachyon::cuda
