// Quantized weight matrices: the one form that every quantized checkpoint format (GPTQ,
// AWQ, FP8, compressed-tensors) and every quantization at load becomes, and that the
// backends' linear kernels read.
//
// A quantized matrix travels through the model layer as a Tensor of its logical shape
// [n, k] (out, in): a typed view that fills the same LinearWeights, MoE expert and
// lm_head slots as a dense weight, so a linear takes either and the backend picks the
// kernel. The view's owner is the QuantizedMatrix (quantized(t) finds it); its dtype
// names the payload (u8: integers, f8_e4m3: fp8). Its memory is only read through the
// QuantizedMatrix, and its nbytes() is not the matrix's size (QuantizedMatrix::nbytes).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"

namespace tachyon {

enum class QuantScheme : uint8_t {
  // Unsigned integers of `bits` bits (4 or 8) in groups of group_size along k:
  //   w[i, j] = (q[i, j] - zeros[i, j / group_size]) * scales[i, j / group_size].
  kInt,
  // float8 e4m3 values with one scale per [block_n, block_k] block:
  //   w[i, j] = q[i, j] * scales[i / block_n, j / block_k].
  kFp8,
};

struct QuantizedMatrix {
  QuantScheme scheme = QuantScheme::kInt;
  int64_t n = 0;  // rows (output features)
  int64_t k = 0;  // columns (input features)
  int32_t bits = 8;
  int64_t group_size = 0;  // kInt: divides k (k: one group per row)
  int64_t block_n = 0;     // kFp8: 1 x k is per channel, n x k per tensor
  int64_t block_k = 0;
  // kInt: u8 [n, k * bits / 8], each row's values in column order; 4-bit values two to a
  // byte, the lower nibble first (k even). kFp8: f8_e4m3 [n, k].
  Tensor q;
  // f32. kInt: [n, k / group_size]. kFp8: [ceil(n / block_n), ceil(k / block_k)].
  Tensor scales;
  // kInt: u8 [n, k / group_size], each below 2^bits. Absent for kFp8.
  Tensor zeros;
  // kInt: every zero is 2^(bits - 1) (a symmetric quantization); kernels may rely on it.
  bool symmetric = false;
  // Optional i32 [k], a permutation of [0, k) (act-order checkpoints): column j of the
  // matrix multiplies input element perm[j], so y = w · x[perm]. Absent: the identity.
  Tensor perm;

  int64_t groups() const { return group_size > 0 ? k / group_size : 0; }
  // Bytes of one row of q: k * bits / 8 (kInt), k (kFp8).
  int64_t row_bytes() const { return scheme == QuantScheme::kFp8 ? k : k * bits / 8; }
  // kInt: value j of row i (host memory).
  uint32_t value(int64_t i, int64_t j) const;
  Device device() const { return q.device(); }
  // Bytes of q, scales, zeros and perm.
  size_t nbytes() const;
  // "int4 g128 [4096, 4096]", "int8 per-channel [..]", "fp8 block 128x128 [..]".
  std::string str() const;
  // Throws InvalidArgument naming what disagrees: the shapes and dtypes of the tensors
  // against n, k, bits and the group or block shape; on the host also every zero's
  // range, the symmetric flag and perm being a permutation.
  void validate() const;
};

// Value j of a row of packed `bits`-bit integers (QuantizedMatrix::q's layout), and its
// setting (into a row that holds zeros there).
inline uint32_t packed_int(const uint8_t* row, int32_t bits, int64_t j) {
  if (bits == 8) return row[j];
  const uint8_t b = row[j >> 1];
  return (j & 1) ? (b >> 4) : (b & 0xf);
}
inline void set_packed_int(uint8_t* row, int32_t bits, int64_t j, uint32_t v) {
  if (bits == 8)
    row[j] = static_cast<uint8_t>(v);
  else
    row[j >> 1] |= static_cast<uint8_t>((j & 1) ? v << 4 : v);
}

// A kInt matrix [n, k] of `bits` bits in groups of group_size: q zeroed, scales and
// zeros allocated for the caller to fill (shapes as validate() wants them).
std::shared_ptr<QuantizedMatrix> make_int_matrix(int64_t n, int64_t k, int32_t bits,
                                                 int64_t group_size);

// The typed view of m: shape [n, k], dtype u8 (kInt) or f8_e4m3 (kFp8), on m's device.
Tensor quantized_view(std::shared_ptr<const QuantizedMatrix> m);
// t's quantized matrix (null for a dense tensor). A view of part of one is an error.
const QuantizedMatrix* quantized(const Tensor& t);
std::shared_ptr<const QuantizedMatrix> quantized_ptr(const Tensor& t);

// Rows [r0, r1) of the logical matrix (perm applied: y = w · x), as f32 into out
// [(r1 - r0) * k]. Host matrices only.
void dequantize_rows(const QuantizedMatrix& m, int64_t r0, int64_t r1, float* out);
// The whole logical matrix, f32 [n, k] on the host.
Tensor dequantize(const QuantizedMatrix& m);

// Host matrices stacked row-wise (q/k/v, gate/up) into one of sum(n) rows; null when
// they do not stack: other schemes, bits, k, group sizes or perms, or fp8 blocks that a
// part's row count does not fill.
std::shared_ptr<QuantizedMatrix> stack_quantized_rows(
    std::span<const QuantizedMatrix* const> parts);

// Round-to-nearest quantizations of a dense host matrix w [n, k] (f32, f16 or bf16; a
// non-finite value is an error). Integers: bits 4 or 8, group_size dividing k (k: per
// channel); symmetric scales max|w| / (2^(bits-1) - 1) with zero 2^(bits-1) (4 bits:
// the scale among that times 1, 0.95, ..., 0.7 whose rounding leaves the least squared
// error, a clipped range), else (max - min) / (2^bits - 1) with the zero that puts 0.0
// on an integer (GPTQ's rule). Throws InvalidArgument otherwise.
std::shared_ptr<QuantizedMatrix> quantize_int(const Tensor& w, int32_t bits, int64_t group_size,
                                              bool symmetric);
// FP8 e4m3 with scale max|w| / 448 per [block_n, block_k] block (1 x k: per channel).
std::shared_ptr<QuantizedMatrix> quantize_fp8(const Tensor& w, int64_t block_n, int64_t block_k);

}  // namespace tachyon
