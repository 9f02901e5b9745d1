// Linear weights copied once, at load, into the packed layout the GEMM kernels read
// (backend/cpu/gemm.h, pack_weight). The copy is a Tensor of the original's shape and
// dtype whose memory is in that layout; it is recognised by its owner, so a view of
// any other memory is never mistaken for one.
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor.h"

namespace tachyon {
class ThreadPool;
}

namespace tachyon::cpu {

// At least `bytes` of memory, in 2 MiB pages where the kernel grants them (transparent
// huge pages on madvise; advice only), 2 MiB aligned when so; the heap below 2 MiB or
// when the mapping fails. The returned pointer owns it; get() is the data.
std::shared_ptr<void> alloc_large(size_t bytes);

// The packed copy of w ([n, k] f32, f16 or bf16 on the host).
Tensor pack_linear_weight(const Tensor& w, ThreadPool& pool);

// Whether t is (the whole of) such a copy. A view of part of one is an error.
bool is_packed_weight(const Tensor& t);

}  // namespace tachyon::cpu
