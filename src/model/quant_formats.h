// Readers of quantized checkpoint formats: the tensors of one quantized linear module
// (GPTQ, AWQ gemm / gemv, FP8, compressed-tensors) turned into the one internal form,
// a QuantizedMatrix (core/quant.h), every shape, dtype and value range checked first.
//
// Layout facts each reader relies on (n = output features, k = input features,
// pack = 32 / bits values per int32, lowest bits first):
// - GPTQ: qweight i32 [k / pack, n], packed along k; qzeros i32 [groups, n / pack],
//   packed along n; scales f16 [groups, n]; g_idx i32 [k], the group of each input
//   column. w[i, j] = (q - z) * s with the group g_idx[j]. checkpoint_format "gptq"
//   (v1) stores z - 1 in each field, so the reader adds 1 back modulo 2^bits.
// - AWQ gemm: qweight i32 [k, n / 8], packed along n with the columns of each int32
//   interleaved: nibble p holds column (0, 2, 4, 6, 1, 3, 5, 7)[p]; qzeros i32
//   [groups, n / 8] the same way; scales f16 [groups, n]; w = (q - z) * s.
// - AWQ gemv: qweight i32 [n, k / 8], packed along k in plain order; qzeros i32
//   [n, zw] packed along the groups; scales f16 [n, zw * 8], the first `groups` used,
//   where zw = ceil(groups / 8) rounded up to a multiple of 1 (group >= 128), 2 (64) or
//   4 (32).
// - FP8: weight f8_e4m3 [n, k]; weight_scale_inv [ceil(n / bn), ceil(k / bk)] with a
//   weight_block_size, else weight_scale (one per tensor, or one per row); w = q * s.
// - compressed-tensors: float-quantized weight f8_e4m3 + weight_scale ([1] tensor,
//   [n, 1] channel, [ceil(n / bn), ceil(k / bk)] block); pack-quantized weight_packed
//   i32 [n, k / pack] packed along k holding q + 2^(bits - 1) for the signed q, with
//   weight_scale [n, groups] and optional weight_zero_point (signed, either [n, groups]
//   or packed along n [n / pack, groups]); naive-quantized weight i8 [n, k] signed.
//   w = (q - zp) * s.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/quant.h"
#include "core/tensor.h"
#include "model/quant_config.h"

namespace tachyon {

// A checkpoint's tensors by name: an empty Tensor when there is none.
using TensorLookup = std::function<Tensor(const std::string& name)>;

// Whether `module` (a linear layer's name, without ".weight") is stored in the config's
// quantized form: its quantized tensors are present (qweight, weight_packed, or a
// `weight` of an fp8 / int8 dtype). A module that is not is loaded dense.
bool has_quantized_tensors(const QuantConfig& q, const std::string& module,
                           const TensorLookup& get);

// Reads the quantized tensors of `module`, a linear layer of logical shape [n, k], into
// a validated host QuantizedMatrix. Throws InvalidArgument naming the tensor on a
// missing part, a wrong dtype or shape, or values out of range.
std::shared_ptr<QuantizedMatrix> read_quantized(const QuantConfig& q, const std::string& module,
                                                int64_t n, int64_t k, const TensorLookup& get);

}  // namespace tachyon
