// A quantized weight prepared for the GPU (CudaBackend::prepare_linear_weight): a
// QuantizedMatrix's values in the kernels' tiles and its (scale, zero) pairs
// (quant_linear.h),
// carried through the model layer as a typed view whose owner is the QuantWeight.
#pragma once

#include <memory>
#include <string>

#include "backend/cuda/quant_linear.h"
#include "core/quant.h"
#include "core/tensor.h"

namespace tachyon::cuda {

struct QuantWeight {
  QuantArgs args;    // pointers into q and info
  Tensor q;          // u8: the tiles, on the device
  Tensor info;       // f32 [ceil(n / 16), groups, 16, 2]
  Tensor perm;       // i32 [k] or absent
  std::string desc;  // the source matrix's str()
  int64_t n() const { return args.n; }
  int64_t k() const { return args.k; }
};

// Whether the kernels take m (k in whole tiles, groups or fp8 blocks of whole 16-column
// steps); other matrices are dequantized to a dense weight at load.
bool quant_kernels_take(const QuantizedMatrix& m);
QuantKind quant_kind(const QuantizedMatrix& m);
// m's values in the kernels' tiles (host, u8 [bands * tiles * 512]).
Tensor quant_tiles(const QuantizedMatrix& m);
// m's (scale, zero) pairs (host, f32 [ceil(n / 16), groups, 16, 2]; padding rows 0).
Tensor quant_info(const QuantizedMatrix& m);

// The typed view of w ([n, k], u8 or f8_e4m3, on w's device) and back: null for any
// other tensor (a dense weight, or a core QuantizedMatrix view).
Tensor quant_weight_view(std::shared_ptr<const QuantWeight> w);
const QuantWeight* quant_weight(const Tensor& t);

}  // namespace tachyon::cuda
