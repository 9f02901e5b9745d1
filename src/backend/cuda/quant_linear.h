// The quantized products' kernels (quant_linear.cu) and the layout they read (made once
// from a host QuantizedMatrix by CudaBackend::prepare_linear_weight: quant_weight.h).
//
// Every scheme is read the same way: each stored value becomes a float f(q) in registers
// and the weight is f(q) * mul + add, with (mul, add) one float2 per group of gk columns
// and bn rows:
//   int4: f = 1 + q / 128 (exact: the nibble placed in the mantissa under 1.0), so
//         mul = 128 s, add = -(128 + z) s;
//   int8: f = q, mul = s, add = -z s;
//   fp8:  f = the e4m3 value, mul = the block's scale, add = 0.
// Act-order matrices keep their permutation: x's columns are gathered first (y = w · x[perm]).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::cuda {

enum class QuantKind : uint8_t { kInt4, kInt8, kFp8 };

// A prepared weight as the kernels read it (device pointers).
struct QuantArgs {
  QuantKind kind = QuantKind::kInt4;
  int64_t n = 0, k = 0;
  int64_t gk = 0;              // columns per (mul, add) pair
  int64_t bn = 1;              // rows per (mul, add) pair (fp8 blocks; 1 for integers)
  int64_t groups = 0;          // ceil(k / gk): pairs per row of sz
  const uint8_t* q = nullptr;  // [n, k * bits / 8]: the checkpoint's values as they are
  const float* sz = nullptr;   // [ceil(n / bn), 2 * groups]: (mul, add) pairs
};

// Rows at most the matrix-vector kernel takes; larger products dequantize pieces of rows
// into a 16-bit scratch and run the dense GEMM on them. Measured on an H100 at the
// Llama-3-8B shapes, each row beyond the first adds 4-7 us to the kernel (qkv: 16.3 us at
// m = 1, 116.8 at m = 16), while the dequantized GEMM takes 67-325 us from m = 16 on:
// the two meet near m = 8.
constexpr int64_t kQuantGemvMaxRows = 8;
// y[i, j] (row stride ldy; f32 when y_f32, else x's dtype) (=, or += when add) sum_c
// x[i, c] w[j, c] for m <= kQuantGemvMaxRows rows, x [m, k] bf16 or f16.
void launch_quant_gemv(const QuantArgs& w, const void* x, DType x_type, int64_t m, void* y,
                       bool y_f32, int64_t ldy, bool add, cudaStream_t stream);
// out [r1 - r0, k] (dtype bf16 or f16) = rows [r0, r1) of w, dequantized.
void launch_quant_dequant(const QuantArgs& w, int64_t r0, int64_t r1, void* out, DType type,
                          cudaStream_t stream);
// out[i, j] = x[i, perm[j]], x and out [m, k] of 2-byte elements.
void launch_gather_cols(const void* x, const int32_t* perm, int64_t m, int64_t k, void* out,
                        cudaStream_t stream);

}  // namespace tachyon::cuda
