// Internal: the per-instruction-set kernels behind gemm_xwt. gemm.cc owns the blocking,
// threading and edge handling; each gemm_<isa>.cc provides these few building blocks,
// compiled for its instruction set with function target attributes (never with
// per-file -m flags, so that no inline function from a shared header is emitted with
// instructions the CPU may lack).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/gemm.h"
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

  // Packed weights (gemm.h), for `panels` (<= packed_panels(rows)) consecutive packed
  // panels, panel q at `panel` + q * stride elements with output columns y + q * kPanel:
  // y[i, cols] (+)= xp[0:kcb, i] · panel[0:kcb]ᵀ (+ bias) for i < rows (<= mr), all
  // kPanel columns of each panel but last_cols of the last one. `panel` points at k step
  // p0 (even). xp is packed x as for micro; for bf16 with kcb odd, row kcb of xp must be
  // finite (it meets the zero padding). Null on paths that unpack panels and run micro.
  void (*packed_micro)(int rows, const float* xp, const void* panel, int64_t stride, int panels,
                       DType dtype, int64_t kcb, float* y, int64_t ldy, int last_cols,
                       bool accumulate, const float* bias);
  int (*packed_panels)(int rows);
  // A packed panel at k steps [0, kcb) (from an even step) as f32 in micro's layout:
  // sub-panels of nr columns, out[q][p][c] = column q * nr + c at step p. Null: a
  // portable loop does it.
  void (*unpack_panel)(const void* panel, DType dtype, int64_t kcb, float* out);
};

// Per-thread scratch, 64-byte aligned, grown on demand: one buffer for a task's panels
// and one for the packed x a caller shares with its job's workers.
float* task_scratch(size_t floats);
float* caller_scratch(size_t floats);

// kern.micro on an nr-wide panel for a tile of which only `cols` (<= nr) columns are
// kept: partial tiles go through a side buffer so that y is not written past cols.
void micro_cols(const GemmKernels& kern, int rows, const float* xp, const float* panel, int64_t kcb,
                float* y, int64_t ldy, int64_t cols, bool accumulate, const float* bias);

// Floats per block of packed x (pack_x_blocks): k rounded up to even (bf16 pairs) rows
// of mr, room for the kernel's overrun, a multiple of 16.
int64_t packed_x_stride(const GemmKernels& kern, int64_t k);
// x rows [0, m) packed per block of kern.mr rows into `out` (block ib at ib * stride),
// with a zero row k when k is odd. On the pool when there are many blocks.
void pack_x_blocks(const GemmKernels& kern, const float* x, int64_t m, int64_t k, int64_t ldx,
                   float* out, int64_t stride, ThreadPool& pool);

// gemm_packed.cc: the product for entries that are all packed (m <= about 512 rows).
void run_packed(const GemmKernels& kern, const float* x, int64_t m, int64_t k, int64_t ldx,
                std::span<const GemmWeight> weights, ThreadPool& pool);

const GemmKernels& portable_kernels();
// The kernels of a path (callers check support first).
const GemmKernels& kernels_for(CpuIsa isa);
// Defined on x86-64 only; callers check support first.
const GemmKernels& avx2_kernels();
const GemmKernels& avx512_kernels();

}  // namespace tachyon::cpu::detail
