// Tensor maps for the copy engine (TMA) of Hopper kernels: the driver's encoder, reached
// through the runtime (no link against libcuda), and the one form the kernels use.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::cuda {

// Whether the driver offers cuTensorMapEncodeTiled (CUDA 12.0 and later).
bool tensor_map_encoder_available();

// A row-major [rows, cols] 16-bit matrix (row stride ld elements, a multiple of 8) in
// boxes of box_rows x 64 columns, 128-byte swizzled; loads fill zeros past its edges,
// stores are clipped. False when the encoder is missing or refuses the shape.
bool encode_map(CUtensorMap& map, const void* ptr, DType type, int64_t rows, int64_t cols,
                int64_t ld, uint32_t box_rows);

}  // namespace tachyon::cuda
