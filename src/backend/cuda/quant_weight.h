// A quantized weight prepared for the GPU (CudaBackend::prepare_linear_weight): the
// device copy of a QuantizedMatrix's values and its (mul, add) pairs (quant_linear.h),
// carried through the model layer as a typed view whose owner is the QuantWeight.
#pragma once

#include <memory>
#include <string>

#include "backend/cuda/quant_linear.h"
#include "core/quant.h"
#include "core/tensor.h"

namespace tachyon::cuda {

struct QuantWeight {
  QuantArgs args;    // pointers into q and sz
  Tensor q;          // u8 [n, k * bits / 8] on the device
  Tensor sz;         // f32 [ceil(n / bn), 2 * groups]
  Tensor perm;       // i32 [k] or absent
  std::string desc;  // the source matrix's str()
  int64_t n() const { return args.n; }
  int64_t k() const { return args.k; }
};

// Whether the kernels take m as it is (k in whole 16-byte pieces, groups of whole
// 8-column chunks); other matrices are dequantized to a dense weight at load.
bool quant_kernels_take(const QuantizedMatrix& m);
// The (mul, add) pairs of m (host), [ceil(n / bn), 2 * groups] f32.
Tensor quant_pairs(const QuantizedMatrix& m);

// The typed view of w ([n, k], u8 or f8_e4m3, on w's device) and back: null for any
// other tensor (a dense weight, or a core QuantizedMatrix view).
Tensor quant_weight_view(std::shared_ptr<const QuantWeight> w);
const QuantWeight* quant_weight(const Tensor& t);

}  // namespace tachyon::cuda
