// The quantized products' kernels (quant_linear.cu) and the layout they read (made once
// from a host QuantizedMatrix by CudaBackend::prepare_linear_weight: quant_weight.h).
//
// The values are stored in tiles of 16 rows by kQuantTileCols columns (64 for int4, 32
// for int8 and fp8), 512 bytes each, tiles of a row band in column order, bands in row
// order (rows padded to a whole band). Within a tile, lane l of a warp (g = l / 4,
// t = l % 4) owns 16 bytes: for each 16-column step s of the tile, the 8 values of the
// A operand of an mma.sync m16n8k16 (rows g and g + 8, columns 2t, 2t + 1, 2t + 8,
// 2t + 9 of the step), so that one 16-byte load gives a lane all it multiplies. Value v
// (0..7) of a step is (row g + 8 ((v >> 1) & 1), column 2t + (v & 1) + 8 (v >> 2)):
//   int4: step s is the lane's 32-bit word s, value v in nibble (v >> 1) + 4 (v & 1);
//   int8, fp8: step s is the lane's bytes 8s..8s+7, value v in byte 8s + v.
// Each (row, group of gk columns) has an info pair (scale s, zero z): the weight is
// (q - z) * s (fp8: z = 0, s the block's scale), stored [band][group][16 rows].
// Act-order matrices keep their permutation: x's columns are gathered first (y = w · x[perm]).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::cuda {

enum class QuantKind : uint8_t { kInt4, kInt8, kFp8 };

constexpr int64_t kQuantTileRows = 16;
constexpr int64_t kQuantTileBytes = 512;
constexpr int64_t quant_tile_cols(QuantKind kind) {
  return kind == QuantKind::kInt4 ? 64 : 32;
}

// A prepared weight as the kernels read it (device pointers).
struct QuantArgs {
  QuantKind kind = QuantKind::kInt4;
  int64_t n = 0, k = 0;
  int64_t gk = 0;               // columns per info pair, a multiple of 16
  int64_t groups = 0;           // ceil(k / gk)
  const uint8_t* q = nullptr;   // the tiles: ceil(n / 16) * (k / tile_cols) * 512 bytes
  const float* info = nullptr;  // [ceil(n / 16), groups, 16] (scale, zero) pairs
};

// Rows at most the matrix-vector kernel takes; larger products dequantize pieces of rows
// into a 16-bit scratch and run the dense GEMM on them.
constexpr int64_t kQuantGemvMaxRows = 8;
// y[i, j] (row stride ldy; f32 when y_f32, else x's dtype) (=, or += when add) sum_c
// x[i, c] w[j, c] for m <= kQuantGemvMaxRows rows, x [m, k] bf16 or f16.
void launch_quant_gemv(const QuantArgs& w, const void* x, DType x_type, int64_t m, void* y,
                       bool y_f32, int64_t ldy, bool add, cudaStream_t stream);
// out [r1 - r0, k] (dtype bf16 or f16) = rows [r0, r1) of w, dequantized (r0 a multiple of
// 16).
void launch_quant_dequant(const QuantArgs& w, int64_t r0, int64_t r1, void* out, DType type,
                          cudaStream_t stream);
// out[i, j] = x[i, perm[j]], x and out [m, k] of 2-byte elements.
void launch_gather_cols(const void* x, const int32_t* perm, int64_t m, int64_t k, void* out,
                        cudaStream_t stream);

}  // namespace tachyon::cuda
