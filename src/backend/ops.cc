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
                              LayerKvCache& cache, Tensor& qkv, const LoraStep* lora) {
  const Tensor h = norm != nullptr ? normed(x, *norm) : x;
  const QkvLayout& layout = p.layout;
  if (p.qkv) {
    product(h, p.qkv, qkv, 0, lora);
  } else {
    product(h, p.q, qkv, 0, lora);
    product(h, p.k, qkv, layout.q_cols(), lora);
    product(h, p.v, qkv, layout.q_cols() + layout.kv_cols(), lora);
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

void Backend::mlp_input(const Tensor& x, const NormParams* norm, const MlpInput& p, Tensor& out,
                        const LoraStep* lora) {
  const Tensor h = norm != nullptr ? normed(x, *norm) : x;
  if (!p.gated) {
    if (lora == nullptr || !p.up.lora) {
      linear(h, p.up.w, p.up.b, out, 0, p.act);
      return;
    }
    product(h, p.up, out, 0, lora);
    activation(out, p.act);
    return;
  }
  const int64_t inter = out.dim(1);
  Tensor gu = workspace(Workspace::kGateUp, h.dim(0), 2 * inter, activation_dtype());
  if (p.gate_up) {
    product(h, p.gate_up, gu, 0, lora);
  } else {
    product(h, p.gate, gu, 0, lora);
    product(h, p.up, gu, inter, lora);
  }
  gated_activation(gu, p.act, out);
}

void Backend::linear_residual(const Tensor& x, const LinearWeights& w, Tensor& residual,
                              const LoraStep* lora) {
  Tensor product = workspace(Workspace::kProduct, x.dim(0), w.w.dim(0), residual.dtype());
  linear(x, w.w, w.b, product);
  add(residual, product, residual);
  if (lora != nullptr && w.lora) this->lora(x, *lora, w.lora, residual, 0);
}

void Backend::product(const Tensor& x, const LinearWeights& w, Tensor& out, int64_t col_offset,
                      const LoraStep* lora) {
  linear(x, w.w, w.b, out, col_offset);
  if (lora != nullptr && w.lora) this->lora(x, *lora, w.lora, out, col_offset);
}

}  // namespace tachyon
