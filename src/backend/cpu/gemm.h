// Matrix products for the CPU backend. Weights stay in their checkpoint dtype
// (f32, f16, bf16) and layout ([out_features, in_features], as a Hugging Face Linear
// stores them) and are converted to f32 on the fly inside the kernel.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tachyon {

class ThreadPool;

namespace cpu {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]), f32 activations and output.
// ldx / ldy are the row strides of x and y in elements (>= k and >= n).
// `bias` may be null. Work is split over `pool` (the global pool when null).
void gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
              int64_t n, const float* bias, float* y, int64_t ldy, ThreadPool* pool = nullptr);

}  // namespace cpu
}  // namespace tachyon
