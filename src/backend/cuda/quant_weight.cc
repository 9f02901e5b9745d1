// QuantWeight's host side (quant_linear.h): which matrices the kernels take, their (mul,
// add) pairs, and the typed view that carries a prepared weight through the model layer.
#include <vector>

#include "backend/cuda/quant_weight.h"
#include "core/error.h"

namespace tachyon::cuda {
namespace {

struct QuantWeightOwner {
  std::shared_ptr<const QuantWeight> weight;
  void operator()(const void*) const {}
};

}  // namespace

bool quant_kernels_take(const QuantizedMatrix& m) {
  if (m.scheme == QuantScheme::kFp8) return m.k % 16 == 0 && m.block_k % 8 == 0;
  return m.k % (m.bits == 4 ? 32 : 16) == 0 && m.group_size % 8 == 0;
}

Tensor quant_pairs(const QuantizedMatrix& m) {
  TACHYON_CHECK(m.device().is_cpu(), "quant_pairs: {} is not on the host", m.str());
  const bool fp8 = m.scheme == QuantScheme::kFp8;
  const int64_t rows = fp8 ? m.scales.dim(0) : m.n;
  const int64_t groups = fp8 ? m.scales.dim(1) : m.groups();
  Tensor out = Tensor::empty({rows, 2 * groups}, DType::kF32);
  const auto* s = m.scales.data<float>();
  auto* o = out.data<float>();
  for (int64_t i = 0; i < rows * groups; ++i) {
    if (fp8) {
      o[2 * i] = s[i];
      o[2 * i + 1] = 0.f;
      continue;
    }
    const float z = static_cast<float>(m.zeros.data<uint8_t>()[i]);
    if (m.bits == 4) {
      o[2 * i] = 128.f * s[i];
      o[2 * i + 1] = -(128.f + z) * s[i];
    } else {
      o[2 * i] = s[i];
      o[2 * i + 1] = -z * s[i];
    }
  }
  return out;
}

Tensor quant_weight_view(std::shared_ptr<const QuantWeight> w) {
  TACHYON_CHECK(w && w->q, "quant_weight_view of an empty weight");
  const DType dtype = w->args.kind == QuantKind::kFp8 ? DType::kF8E4M3 : DType::kU8;
  void* data = const_cast<void*>(w->q.raw());
  const Device dev = w->q.device();
  const Shape shape{w->n(), w->k()};
  std::shared_ptr<void> owner(data, QuantWeightOwner{std::move(w)});
  return Tensor::wrap(data, shape, dtype, std::move(owner), dev);
}

const QuantWeight* quant_weight(const Tensor& t) {
  if (!t || !t.owner()) return nullptr;
  const auto* d = std::get_deleter<QuantWeightOwner>(t.owner());
  if (d == nullptr) return nullptr;
  const QuantWeight* w = d->weight.get();
  TACHYON_CHECK(t.raw() == w->q.raw() && t.ndim() == 2 && t.dim(0) == w->n() && t.dim(1) == w->k(),
                "a view of part of the quantized weight {} ({})", w->desc, t.str());
  return w;
}

}  // namespace tachyon::cuda
