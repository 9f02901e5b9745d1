// QuantWeight's host side (quant_linear.h): which matrices the kernels take, their tiles
// and (scale, zero) pairs, and the typed view that carries a prepared weight through the model
// layer.
#include <algorithm>

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
  const int64_t gk = m.scheme == QuantScheme::kFp8 ? m.block_k : m.group_size;
  return m.k % quant_tile_cols(quant_kind(m)) == 0 && gk % 16 == 0;
}

QuantKind quant_kind(const QuantizedMatrix& m) {
  if (m.scheme == QuantScheme::kFp8) return QuantKind::kFp8;
  return m.bits == 4 ? QuantKind::kInt4 : QuantKind::kInt8;
}

Tensor quant_tiles(const QuantizedMatrix& m) {
  TACHYON_CHECK(m.device().is_cpu(), "quant_tiles: {} is not on the host", m.str());
  TACHYON_CHECK(quant_kernels_take(m), "quant_tiles: {} is not for the kernels", m.str());
  const QuantKind kind = quant_kind(m);
  const int64_t tc = quant_tile_cols(kind), tiles = m.k / tc;
  const int64_t bands = (m.n + kQuantTileRows - 1) / kQuantTileRows;
  Tensor out = Tensor::empty({bands * tiles * kQuantTileBytes}, DType::kU8);
  auto* o = out.data<uint8_t>();
  std::fill(o, o + out.numel(), uint8_t{0});
  const auto* q = m.q.data<uint8_t>();
  const bool int4 = kind == QuantKind::kInt4;
  const int64_t row_bytes = m.row_bytes();
  for (int64_t row = 0; row < m.n; ++row) {
    const int64_t band = row / kQuantTileRows, rr = row % kQuantTileRows;
    const int64_t g = rr & 7, row_hi = rr >> 3;
    for (int64_t c = 0; c < m.k; ++c) {
      const int64_t t = c / tc, cc = c % tc, step = cc / 16, c16 = cc % 16;
      const int64_t lane = g * 4 + ((c16 & 7) >> 1);
      const int64_t v = (c16 & 1) + 2 * row_hi + 4 * (c16 >> 3);
      uint8_t* tile = o + (band * tiles + t) * kQuantTileBytes + lane * 16;
      if (int4) {
        const uint32_t val = packed_int(q + row * row_bytes, 4, c);
        const int64_t pos = 8 * step + (v >> 1) + 4 * (v & 1);  // nibble of the lane's 16 bytes
        tile[pos / 2] |= static_cast<uint8_t>(val << (4 * (pos & 1)));
      } else {
        tile[8 * step + v] = q[row * row_bytes + c];
      }
    }
  }
  return out;
}

Tensor quant_info(const QuantizedMatrix& m) {
  TACHYON_CHECK(m.device().is_cpu(), "quant_info: {} is not on the host", m.str());
  const bool fp8 = m.scheme == QuantScheme::kFp8;
  const int64_t gk = fp8 ? m.block_k : m.group_size;
  const int64_t groups = (m.k + gk - 1) / gk;
  const int64_t bands = (m.n + kQuantTileRows - 1) / kQuantTileRows;
  Tensor out = Tensor::empty({bands, groups, kQuantTileRows, 2}, DType::kF32);
  auto* o = out.data<float>();
  std::fill(o, o + out.numel(), 0.f);
  const auto* s = m.scales.data<float>();
  const int64_t scale_cols = m.scales.dim(1);
  for (int64_t row = 0; row < m.n; ++row)
    for (int64_t gi = 0; gi < groups; ++gi) {
      float* p =
          o + ((row / kQuantTileRows * groups + gi) * kQuantTileRows + row % kQuantTileRows) * 2;
      if (fp8) {
        p[0] = s[(row / m.block_n) * scale_cols + gi];
      } else {
        p[0] = s[row * scale_cols + gi];
        p[1] = static_cast<float>(m.zeros.data<uint8_t>()[row * scale_cols + gi]);
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
