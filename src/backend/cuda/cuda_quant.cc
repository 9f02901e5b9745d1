// CudaBackend's quantized weights: a QuantizedMatrix (core/quant.h) uploaded once into the
// kernels' tiles (QuantWeight, quant_linear.h), and the products on it: the
// matrix-vector kernel up to kQuantGemvMaxRows rows, above that the weight dequantized
// in pieces of rows into a 16-bit scratch and the dense GEMM run on each piece.
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/quant_weight.h"
#include "core/error.h"

namespace tachyon::cuda {
namespace {

// Weight elements dequantized at a time for the GEMM path (64 MiB of bf16 scratch).
constexpr int64_t kDequantElems = int64_t{1} << 25;

}  // namespace

Tensor CudaBackend::prepare_linear_weight(const Tensor& host) {
  const QuantizedMatrix* m = quantized(host);
  if (m == nullptr) {
    if (const QuantWeight* w = quant_weight(host)) {
      TACHYON_CHECK(host.device() == device(), "prepare_linear_weight: {} ({}) on {}", w->desc,
                    host.str(), host.device().str());
      return host;  // prepared already
    }
    return prepare_weight(host);
  }
  TACHYON_CHECK(m->device().is_cpu(), "prepare_linear_weight: {} on {} (from the host only)",
                m->str(), m->device().str());
  m->validate();
  // Shapes the kernels do not take (k not in whole tiles, groups not in whole 16-column
  // steps), and every matrix of an f32 backend (the kernels read 16-bit
  // activations), run as the dense weight they mean.
  if (dtype_ == DType::kF32 || !quant_kernels_take(*m)) return prepare_weight(dequantize(*m));
  auto w = std::make_shared<QuantWeight>();
  QuantArgs& a = w->args;
  a.kind = quant_kind(*m);
  a.n = m->n;
  a.k = m->k;
  a.gk = m->scheme == QuantScheme::kFp8 ? m->block_k : m->group_size;
  a.groups = (m->k + a.gk - 1) / a.gk;
  const Tensor tiles = quant_tiles(*m), info = quant_info(*m);
  w->q = upload(tiles.raw(), tiles.shape(), DType::kU8, {});
  w->info = upload(info.raw(), info.shape(), DType::kF32, {});
  a.q = w->q.data<uint8_t>();
  a.info = w->info.data<float>();
  if (m->perm) w->perm = upload(m->perm.raw(), m->perm.shape(), DType::kI32, {});
  w->desc = m->str();
  return quant_weight_view(std::move(w));
}

void CudaBackend::quant_product(const Tensor& x, int64_t x_row0, int64_t m, const QuantWeight& qw,
                                void* y, DType y_type, int64_t ldy, const Tensor& bias,
                                Activation act, bool accumulate) {
  const QuantArgs& w = qw.args;
  TACHYON_CHECK(x.dim(1) == w.k, "quantized product: {} for input {}", qw.desc, x.str());
  TACHYON_CHECK(!accumulate || act == Activation::kIdentity,
                "quantized product: an activation on an accumulated product");
  const int64_t k = w.k;
  const size_t es = dtype_size(x.dtype());
  Tensor xs = x;
  int64_t row0 = x_row0;
  if (qw.perm) {
    // y = w · x[perm]: x's columns gathered into a scratch first.
    void* g = scratch(quant_x_, static_cast<size_t>(m * k) * es);
    launch_gather_cols(static_cast<const char*>(x.raw()) + x_row0 * k * static_cast<int64_t>(es),
                       qw.perm.data<int32_t>(), m, k, g, stream_);
    xs = Tensor::wrap(g, {m, k}, x.dtype(), quant_x_.owner(), device());
    row0 = 0;
  }
  if (m <= kQuantGemvMaxRows && !batch_invariant_) {
    // Batch-invariant mode takes the GEMM path at every m (its result then does not
    // depend on how many rows come together).
    launch_quant_gemv(w, static_cast<const char*>(xs.raw()) + row0 * k * static_cast<int64_t>(es),
                      x.dtype(), m, y, y_type == DType::kF32, ldy, accumulate, stream_);
    last_linear_path_ = LinearPath::kQuantGemv;
  } else {
    // Pieces of about equal rows, in multiples of 128 (the GEMM's tiles; 2340-row pieces
    // of the 14336-deep down projection ran 2.9x slower than bf16), at most 65408 rows
    // (the dequantization's grid).
    const int64_t count = std::max<int64_t>(1, (w.n * k + kDequantElems - 1) / kDequantElems);
    const int64_t piece_rows =
        std::min<int64_t>({w.n, ((w.n + count - 1) / count + 127) & ~int64_t{127}, 65408});
    void* d = scratch(quant_w_, static_cast<size_t>(piece_rows * k) * es);
    const size_t ys = dtype_size(y_type);
    for (int64_t r0 = 0; r0 < w.n; r0 += piece_rows) {
      const int64_t r1 = std::min(w.n, r0 + piece_rows);
      launch_quant_dequant(w, r0, r1, d, x.dtype(), stream_);
      const Tensor wd = Tensor::wrap(d, {r1 - r0, k}, x.dtype(), quant_w_.owner(), device());
      gemm(xs, row0, m, wd, static_cast<char*>(y) + r0 * static_cast<int64_t>(ys), y_type, ldy,
           Tensor(), Activation::kIdentity, accumulate);
    }
    last_linear_path_ = LinearPath::kQuantDequant;
  }
  if (bias || act != Activation::kIdentity)
    launch_bias_act(y, y_type, ldy, m, w.n, bias ? bias.data<float>() : nullptr, kact(act),
                    stream_);
}

}  // namespace tachyon::cuda
