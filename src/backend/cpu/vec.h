// Small vector kernels shared by the CPU ops: dot products, axpy, row conversion from
// the checkpoint dtypes and fast elementwise activations. Each has an AVX2/FMA path
// chosen at run time and a portable path.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "core/dtype.h"

namespace tachyon::cpu {

// True when the AVX2/FMA/F16C paths are in use (the CPU has them and
// TACHYON_CPU_PORTABLE is not set).
bool use_avx2();

// sum a[i] * b[i]
float dot(const float* a, const float* b, int64_t n);
// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);
// out[i] += rows[i * stride : i * stride + len] · x for i < n: many short dot products
// (a LoRA expand's rows of B); eight rows at a time, their sums reduced together.
void dot_rows_add(const float* rows, int64_t stride, int64_t n, const float* x, int64_t len,
                  float* out);
// sum x[i] and sum (x[i] - center)^2 in f64 (four partial sums, the same on every path).
double sum_f64(const float* x, int64_t n);
double sum_squares_f64(const float* x, int64_t n, double center = 0);
// x[i] *= a
void scale(float* x, float a, int64_t n);
// dst[i] = float(src[i]) for a floating dtype (f32, f16, bf16).
void convert_row(const void* src, DType dtype, int64_t n, float* dst);
// x[i] = act(x[i])
void activate(float* x, int64_t n, Activation act);
// out[i] = act(gate[i]) * up[i]
void gated(const float* gate, const float* up, float* out, int64_t n, Activation act);
// Scalar reference of each activation (also used by tests).
float activation_ref(float x, Activation act);

}  // namespace tachyon::cpu
