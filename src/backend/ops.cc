// The layer-level products' default forms (backend/ops.h), composed of the other ops:
// what a backend with no fused kernel for them runs.
#include "backend/ops.h"

#include <algorithm>

namespace tachyon {

Tensor Backend::workspace(Workspace slot, int64_t rows, int64_t cols, DType dtype) {
  Tensor& storage = workspace_[static_cast<size_t>(slot)];
  const int64_t n = rows * cols;
  if (!storage || storage.dtype() != dtype || storage.numel() < n) {
    // Grown with headroom, so that slowly growing steps do not reallocate every time.
    storage = alloc({std::max<int64_t>(n + n / 4, 1)}, dtype);
  }
  return Tensor::wrap(storage.raw(), {rows, cols}, dtype, storage.owner(), storage.device());
}

Tensor Backend::normed(const Tensor& x, const NormParams& norm) {
  Tensor h = workspace(Workspace::kNormed, x.dim(0), x.dim(1), x.dtype());
  Tensor in = x;  // read only: add_norm without deltas does not write it
  add_norm(in, Tensor(), Tensor(), norm, h);
  return h;
}

void Backend::attention_input(const Tensor& x, const NormParams* norm, const AttentionInput& p,
                              const Tensor& cos_sin, const Tensor& logn, const Tensor& slots,
                              LayerKvCache& cache, Tensor& qkv) {
  const Tensor h = norm != nullptr ? normed(x, *norm) : x;
  const QkvLayout& layout = p.layout;
  if (p.qkv) {
    linear(h, p.qkv.w, p.qkv.b, qkv);
  } else {
    linear(h, p.q.w, p.q.b, qkv, 0);
    linear(h, p.k.w, p.k.b, qkv, layout.q_cols());
    linear(h, p.v.w, p.v.b, qkv, layout.q_cols() + layout.kv_cols());
  }
  if (p.clip > 0) clamp(qkv, p.clip);
  if (p.q_norm.weight) qk_norm(qkv, layout, p.q_norm, p.k_norm);
  if (logn) scale_queries(qkv, layout, logn);
  if (p.rotary != RotaryStyle::kNone)
    rotary_write_kv(qkv, layout, cos_sin, p.rotary, static_cast<int32_t>(cos_sin.dim(1)), slots,
                    cache);
  else
    write_kv(qkv, layout, slots, cache);
}

void Backend::mlp_input(const Tensor& x, const NormParams* norm, const MlpInput& p, Tensor& out) {
  const Tensor h = norm != nullptr ? normed(x, *norm) : x;
  if (!p.gated) {
    linear(h, p.up.w, p.up.b, out, 0, p.act);
    return;
  }
  const int64_t inter = out.dim(1);
  Tensor gu = workspace(Workspace::kGateUp, h.dim(0), 2 * inter, activation_dtype());
  if (p.gate_up) {
    linear(h, p.gate_up.w, p.gate_up.b, gu);
  } else {
    linear(h, p.gate.w, p.gate.b, gu, 0);
    linear(h, p.up.w, p.up.b, gu, inter);
  }
  gated_activation(gu, p.act, out);
}

void Backend::linear_residual(const Tensor& x, const LinearWeights& w, Tensor& residual) {
  Tensor product = workspace(Workspace::kProduct, x.dim(0), w.w.dim(0), residual.dtype());
  linear(x, w.w, w.b, product);
  add(residual, product, residual);
}

}  // namespace tachyon
