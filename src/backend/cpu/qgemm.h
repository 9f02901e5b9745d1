// Quantized linear weights on the CPU (core/quant.h's QuantizedMatrix), repacked once at
// load into the layout the kernels read, and the product y = x · wᵀ over them. Weights
// only: activations stay f32, the weights are dequantized in registers (integers minus
// their zero, fp8 through f16), the scale applied once per group, and accumulation is
// f32, so the result is the f32 product with the dequantized weights to rounding.
//
// Layout: the n rows in panels of kQPanel rows; a panel holds its groups one after the
// other, each group as
//   [kQPanel f32 scales][kQPanel u8 zeros, asymmetric integers only][values]
// with the values k-step-major: one byte per row per step (int8, fp8; a symmetric int8
// stored as the signed q - 128), or for int4 one byte per row per pair of steps (the
// lower nibble the even step). A group is group_size steps (fp8: block_k, the last one
// possibly shorter); an int4 matrix whose groups have an odd number of steps is stored
// as 8-bit values. fp8 scales carry the factor 2^8 that the e4m3 -> f16 conversion takes off.
// Rows past n in the last panel have zero scales. Act-order matrices keep their
// permutation: each call gathers x's columns once (y = w · x[perm]).
//
// Small m (decode) streams each panel once and keeps the m rows of y in registers;
// larger m dequantizes cache-sized panels to f32 and runs the dense GEMM's microkernel
// (gemm_kernels.h) over the packed rows of x.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "core/quant.h"
#include "core/tensor.h"

namespace tachyon {
class ThreadPool;
}

namespace tachyon::cpu {

inline constexpr int64_t kQPanel = 16;

enum class QKind : uint8_t { kInt8, kInt4, kFp8 };

struct QPackedWeight {
  QKind kind = QKind::kInt8;
  int64_t n = 0, k = 0;
  int64_t group = 0;        // steps per group (the last may be shorter)
  int64_t groups = 0;       // ceil(k / group)
  bool zeros = false;       // per-row zeros stored (else: symmetric or fp8)
  bool signed_q = false;    // int8 values stored as q - 128 (symmetric)
  int32_t zero = 0;         // the common zero of a symmetric int4 matrix (8)
  int64_t group_bytes = 0;  // bytes of a full group
  int64_t panel_bytes = 0;
  std::shared_ptr<void> memory;
  std::vector<int32_t> perm;  // empty: the identity
  std::string what;           // the matrix's description (QuantizedMatrix::str)

  int64_t panels() const { return (n + kQPanel - 1) / kQPanel; }
  int64_t group_steps(int64_t g) const { return std::min(group, k - g * group); }
  int64_t header_bytes() const { return kQPanel * 4 + (zeros ? kQPanel : 0); }
  // The start of group g of panel p: its scales, then zeros, then values.
  const uint8_t* group_data(int64_t p, int64_t g) const {
    return static_cast<const uint8_t*>(memory.get()) + p * panel_bytes + g * group_bytes;
  }
};

// The packed copy of a quantized view (core/quant.h; a host matrix) as a Tensor of the
// view's shape and dtype whose owner holds it (not the matrix: that is freed with the
// last view of it).
Tensor pack_quantized_weight(const Tensor& view, ThreadPool& pool);
// t's packed copy (null for any other tensor). A view of part of one is an error.
const QPackedWeight* packed_quantized(const Tensor& t);

// y[m, n] = x[m, k] · wᵀ (+ bias), x with row stride ldx, y with ldy, on `isa`.
void qgemm(CpuIsa isa, const float* x, int64_t m, int64_t ldx, const QPackedWeight& w,
           const float* bias, float* y, int64_t ldy, ThreadPool& pool);

namespace detail {

// The per-instruction-set kernels (qgemm_<isa>.cc).
struct QKernels {
  // y[i, panel rows] = x[i] · panel rows (+ bias) for i < m (<= max_m), panels
  // [p0, p1); only the columns below w.n are written.
  int max_m;
  void (*gemv)(const QPackedWeight& w, const float* x, int m, int64_t ldx, int64_t p0, int64_t p1,
               const float* bias, float* y, int64_t ldy);
  // out[s * ldo + r] = the dequantized weight of row p * kQPanel + r at step s0 + s, for
  // s < steps and r < kQPanel (0 past n).
  void (*dequant)(const QPackedWeight& w, int64_t p, int64_t s0, int64_t steps, float* out,
                  int64_t ldo);
};

const QKernels& portable_qkernels();
const QKernels& avx2_qkernels();
const QKernels& avx512_qkernels();

}  // namespace detail
}  // namespace tachyon::cpu
