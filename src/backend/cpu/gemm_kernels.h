// Internal: the per-instruction-set kernels behind gemm_xwt. gemm.cc owns the blocking,
// threading and edge handling; each gemm_<isa>.cc provides these few building blocks,
// compiled for its instruction set with function target attributes (never with
// per-file -m flags, so that no inline function from a shared header is emitted with
// instructions the CPU may lack).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::cpu::detail {

struct GemmKernels {
  // Decode-shaped products (m <= gemv_max_m): weights streamed once from memory,
  // converted in registers. Computes y[i, j] for i < m and j in [j0, j1).
  int gemv_max_m;
  void (*gemv)(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType dtype,
               int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy);

  // Blocked GEMM: a panel of `nr` weight rows x `kc` columns is converted to f32 in
  // k-major order ([kc][nr]) and reused over all rows of x by an mr x nr microkernel.
  // x is first repacked k-major per block of mr rows ([k][mr]), so the microkernel
  // reads one sequential stream (rows of x 4 KiB apart would fight over L1 sets).
  int mr, nr, kc;
  // out[p][r] = w[j0 + r, p0 + p] for r < rows (<= nr), 0 for rows <= r < nr; p < kcb.
  void (*pack_w)(const void* w, DType dtype, int64_t k, int64_t j0, int64_t rows, int64_t p0,
                 int64_t kcb, float* out);
  // out[p][i] = x[i, p] for i < rows (<= mr), 0 for rows <= i < mr; p < k. `out` has
  // room for k * mr + 16 floats (the kernel may write garbage past k * mr).
  void (*pack_x)(const float* x, int64_t ldx, int rows, int64_t k, float* out);
  // y[i, 0:nr] (+)= xp[0:kcb, i] · panel (+ bias[0:nr]) for i < rows (<= mr), xp being
  // packed x ([kcb][mr]). accumulate: add to y instead of overwriting; bias: null or nr
  // values, added last.
  void (*micro)(int rows, const float* xp, const float* panel, int64_t kcb, float* y, int64_t ldy,
                bool accumulate, const float* bias);
};

const GemmKernels& portable_kernels();
// Defined on x86-64 only; callers check support first.
const GemmKernels& avx2_kernels();
const GemmKernels& avx512_kernels();

}  // namespace tachyon::cpu::detail
