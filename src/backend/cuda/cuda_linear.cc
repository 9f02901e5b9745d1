// CudaBackend's products: linear() (the matrix-vector kernel, cuBLASLt, the wgmma GEMM
// or the batch-invariant kernel) and the layer-level products that fuse a norm, a
// rotary with the KV write, a gated activation or a residual add into them (see
// cuda_backend_impl.h for where each applies).
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/invariant_kernels.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace tachyon::cuda {

void CudaBackend::prepare_input_norm(NormParams& norm, std::span<Tensor* const> readers) {
  if (norm.folded || norm.type != NormType::kRMSNorm || norm.bias || !norm.weight ||
      norm.weight.dtype() != DType::kF32 || norm.weight.device() != device() || readers.empty())
    return;
  for (const Tensor* w : readers) {
    const DType t = w->dtype();
    if (!*w || w->device() != device() || w->ndim() != 2 || norm.weight.numel() != w->dim(1) ||
        (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16))
      return;
  }
  for (Tensor* w : readers) {
    Tensor folded = alloc_->alloc(w->shape(), w->dtype());
    launch_fold_norm(w->raw(), folded.raw(), w->dtype(), w->dim(0), w->dim(1),
                     norm.weight.data<float>(), norm.weight_offset, stream_);
    *w = folded;
  }
  const std::vector<float> ones(static_cast<size_t>(norm.weight.numel()), 1.f);
  norm.weight = upload(ones.data(), norm.weight.shape(), DType::kF32, {});
  norm.weight_offset = 0.f;
  norm.folded = true;
}

void CudaBackend::gemm(const Tensor& x, int64_t x_row0, int64_t m, const Tensor& w, void* y,
                       DType y_type, int64_t ldy, const Tensor& bias, Activation act,
                       bool accumulate) {
  if (const QuantWeight* qw = quant_weight(w)) {
    quant_product(x, x_row0, m, *qw, y, y_type, ldy, bias, act, accumulate);
    return;
  }
  const int64_t k = x.dim(1), n = w.dim(0);
  GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.x =
      static_cast<const char*>(x.raw()) + x_row0 * k * static_cast<int64_t>(dtype_size(x.dtype()));
  g.x_type = x.dtype();
  g.w = w.raw();
  g.w_type = w.dtype();
  g.y = y;
  g.y_type = y_type;
  g.ldy = ldy;
  g.accumulate = accumulate;
  if (!batch_invariant_ && !bias && m <= kGemvAutoRows &&
      (!accumulate || act == Activation::kIdentity) &&
      gemv_supports(x.dtype(), y_type, m, k, g.x, g.w)) {
    last_linear_path_ = LinearPath::kGemv;
    launch_gemv(g.x, g.w, x.dtype(), y, y_type, m, n, k, ldy, accumulate, stream_);
    if (act != Activation::kIdentity)
      launch_bias_act(y, y_type, ldy, m, n, nullptr, kact(act), stream_);
    return;
  }
  g.bias = bias_for(bias, y_type);
  g.relu = act == Activation::kRelu;
  if (batch_invariant_) {
    TACHYON_CHECK(!accumulate, "an accumulating product: not in batch-invariant mode");
    last_linear_path_ = LinearPath::kInvariant;
    launch_invariant_matmul(g.x, w.raw(), x.dtype(), m, n, k, y, y_type, ldy, stream_);
    if (bias || act != Activation::kIdentity)
      launch_bias_act(y, y_type, ldy, m, n, bias ? bias.data<float>() : nullptr, kact(act),
                      stream_);
    return;
  }
  last_linear_path_ = LinearPath::kCublas;
  const bool done = gemm_->run(g);
  if (!done) {
    launch_bias_act(y, y_type, ldy, m, n, bias ? bias.data<float>() : nullptr, kact(act), stream_);
  } else if (act != Activation::kIdentity && act != Activation::kRelu) {
    launch_bias_act(y, y_type, ldy, m, n, nullptr, kact(act), stream_);
  }
}

void CudaBackend::check_linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                               const Tensor& out, int64_t col_offset) {
  check_act(x, "linear x");
  check_here(w, "linear weight");
  check_here(out, "linear out");
  check_2d(x, "linear x");
  check_2d(w, "linear weight");
  check_2d(out, "linear out");
  TACHYON_CHECK(w.dtype() == x.dtype() || quant_weight(w) != nullptr,
                "linear weight {} is not in the compute dtype {} (prepare_weight)", w.str(),
                dtype_name(x.dtype()));
  TACHYON_CHECK(out.dtype() == dtype_ || out.dtype() == DType::kF32,
                "linear out {} must be {} or f32", out.str(), dtype_name(dtype_));
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  TACHYON_CHECK(w.dim(1) == k, "linear weight {} for input {}", w.str(), x.str());
  TACHYON_CHECK(out.dim(0) == m && col_offset >= 0 && out.dim(1) >= col_offset + n,
                "linear out {} for {} columns at {}", out.str(), n, col_offset);
  TACHYON_CHECK(!bias || bias.numel() == n, "linear bias {} for {} outputs", bias.str(), n);
}

void CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                         int64_t col_offset, Activation act) {
  wrote(out);
  check_linear(x, w, bias, out, col_offset);
  const int64_t m = x.dim(0);
  if (m == 0) return;
  void* y =
      static_cast<char*>(out.raw()) + col_offset * static_cast<int64_t>(dtype_size(out.dtype()));
  gemm(x, 0, m, w, y, out.dtype(), out.dim(1), bias, act);
}

void CudaBackend::linear_residual(const Tensor& x, const LinearWeights& w, Tensor& residual,
                                  const LoraStep* lora) {
  linear_residual_product(x, w, residual);
  if (lora != nullptr && w.lora) this->lora(x, *lora, w.lora, residual, 0);
}

void CudaBackend::linear_residual_product(const Tensor& x, const LinearWeights& w,
                                          Tensor& residual) {
  const int64_t m = x.dim(0);
  check_linear(x, w.w, w.b, residual, 0);
  check_act(residual, "linear_residual residual");
  TACHYON_CHECK(residual.dim(1) == w.w.dim(0), "linear_residual into {} for {} outputs",
                residual.str(), w.w.dim(0));
  if (m == 0) return;
  wrote(residual);
  if (batch_invariant_) {
    Backend::linear_residual(x, w, residual, nullptr);
    return;
  }
  if (x.dim(1) >= kDeepK && !w.b && m >= kEpilogueRows && quant_weight(w.w) == nullptr &&
      gemm_wgmma_active(dtype_)) {
    WgmmaGemmArgs g = wgmma_product(x.raw(), w.w.raw(), residual.raw(), dtype_, m, w.w.dim(0),
                                    x.dim(1), residual.dim(1));
    g.handoff = true;
    g.add = true;
    const int parts = gemm_wgmma_square_parts(g.n_out);
    g.row_squares = static_cast<float*>(
        scratch(row_squares_, static_cast<size_t>(parts) * static_cast<size_t>(m) * 4));
    if (launch_gemm_wgmma(g, stream_)) {
      last_linear_path_ = LinearPath::kWgmma;
      kept_squares_ = KeptSquares{residual.raw(), m, residual.dim(1), parts};
      return;
    }
  }
  gemm(x, 0, m, w.w, residual.raw(), residual.dtype(), residual.dim(1), w.b, Activation::kIdentity,
       true);
}

void CudaBackend::wrote(const void* p, size_t bytes) {
  const auto* b = static_cast<const char*>(p);
  const auto* k = static_cast<const char*>(kept_squares_.data);
  const size_t kept_bytes =
      static_cast<size_t>(kept_squares_.rows * kept_squares_.cols) * dtype_size(dtype_);
  if (k != nullptr && b < k + kept_bytes && k < b + bytes) kept_squares_ = KeptSquares{};
}

const float* CudaBackend::row_scales(const Tensor& x, float eps) {
  const int64_t m = x.dim(0), k = x.dim(1);
  auto* out = static_cast<float*>(scratch(row_scale_, static_cast<size_t>(m) * sizeof(float)));
  const KeptSquares& kept = kept_squares_;
  if (kept.data == x.raw() && kept.rows == m && kept.cols == k)
    launch_row_inv_rms_parts(row_squares_.data<float>(), kept.parts, m, k, eps, out, stream_);
  else
    launch_row_inv_rms(x.raw(), x.dtype(), m, k, eps, out, stream_);
  return out;
}

void CudaBackend::attention_input(const Tensor& x, const NormParams* norm, const AttentionInput& p,
                                  const Tensor& cos_sin, const Tensor& logn, const Tensor& slots,
                                  LayerKvCache& cache, Tensor& qkv, const LoraStep* lora) {
  // The product, the rotary and the cache write in one pass, where nothing else touches
  // the rows between them (and a folded norm's scaling of the rows): not with adapters.
  const int64_t m = x.dim(0);
  const RotaryStyle style = p.rotary;
  const int32_t rot = style != RotaryStyle::kNone ? static_cast<int32_t>(cos_sin.dim(1)) : 0;
  if (!batch_invariant_ && p.qkv && !p.qkv.b && quant_weight(p.qkv.w) == nullptr && !kv_i8() &&
      (lora == nullptr || !p.qkv.lora) && p.clip <= 0 && !p.q_norm.weight && !logn &&
      m >= kEpilogueRows && (style == RotaryStyle::kHalf || style == RotaryStyle::kInterleaved) &&
      rot > 0 && gemm_wgmma_active(dtype_) && (norm == nullptr || rides(*norm))) {
    const Tensor& w = p.qkv.w;
    check_linear(x, w, Tensor(), qkv, 0);
    check_rotary(qkv, p.layout, cos_sin, style, rot, "attention_input");
    TACHYON_CHECK(qkv.dim(1) == w.dim(0), "attention_input into {} for {} outputs", qkv.str(),
                  w.dim(0));
    check_kv_write(slots, m, p.layout, cache, "attention_input");
    WgmmaRotaryKv r;
    r.cos_sin = cos_sin.data<float>();
    r.rot = rot;
    r.style = static_cast<KRotary>(static_cast<int>(style));
    r.heads = p.layout.num_heads;
    r.kv_heads = p.layout.num_kv_heads;
    r.head_dim = p.layout.head_dim;
    r.slots = slots.data<int32_t>();
    r.k_cache = cache.k.raw();
    r.v_cache = cache.v.raw();
    r.kv_fp8 = kv_fp8();
    r.num_blocks = cache.num_blocks();
    r.block_size = static_cast<int>(cache.block_size());
    r.err = err_dev_;
    WgmmaGemmArgs g =
        wgmma_product(x.raw(), w.raw(), qkv.raw(), dtype_, m, w.dim(0), x.dim(1), qkv.dim(1));
    g.handoff = true;
    g.rotary = &r;
    if (norm != nullptr) g.row_scale = row_scales(x, norm->eps);
    wrote(qkv);
    if (launch_gemm_wgmma(g, stream_)) {
      last_linear_path_ = LinearPath::kWgmma;
      return;
    }
  }
  Backend::attention_input(x, norm, p, cos_sin, logn, slots, cache, qkv, lora);
}

void CudaBackend::mlp_input(const Tensor& x, const NormParams* norm, const MlpInput& p, Tensor& out,
                            const LoraStep* lora) {
  // gate/up and the gated activation in one product (without the [T, 2I] intermediate),
  // with a folded norm's scaling of the rows where the epilogue is handed off.
  const int64_t m = x.dim(0);
  const bool handoff = m >= kGatedHandoffRows;
  const bool fused = !batch_invariant_ && p.gated && p.gate_up && !p.gate_up.b &&
                     quant_weight(p.gate_up.w) == nullptr && (lora == nullptr || !p.gate_up.lora) &&
                     m >= kGatedMinRows && out.dtype() == dtype_ && out.dim(1) % 8 == 0 &&
                     gemm_wgmma_active(dtype_);
  if (!fused) {
    Backend::mlp_input(x, norm, p, out, lora);
    return;
  }
  const float* scale = nullptr;
  Tensor h = x;
  if (norm != nullptr) {
    if (handoff && rides(*norm))
      scale = row_scales(x, norm->eps);
    else
      h = normed(x, *norm);
  }
  const Tensor& w = p.gate_up.w;
  check_act(h, "mlp_input x");
  check_here(w, "mlp_input weight");
  check_act(out, "mlp_input out");
  check_2d(h, "mlp_input x");
  check_2d(w, "mlp_input weight");
  check_2d(out, "mlp_input out");
  TACHYON_CHECK(w.dtype() == h.dtype() && w.dim(1) == h.dim(1) && w.dim(0) == 2 * out.dim(1) &&
                    out.dim(0) == m,
                "mlp_input: weight {} for input {} and output {}", w.str(), h.str(), out.str());
  WgmmaGemmArgs g =
      wgmma_product(h.raw(), w.raw(), out.raw(), dtype_, m, out.dim(1), h.dim(1), out.dim(1));
  g.w_rows = w.dim(0);
  g.up_row = out.dim(1);
  g.act = kact(p.act);
  g.handoff = handoff;
  g.row_scale = scale;
  wrote(out);
  if (launch_gemm_wgmma(g, stream_)) {
    last_linear_path_ = LinearPath::kWgmma;
    return;
  }
  if (scale != nullptr)
    Backend::mlp_input(x, norm, p, out, lora);
  else
    Backend::mlp_input(h, nullptr, p, out, lora);
}

Tensor CudaBackend::workspace(Workspace slot, int64_t rows, int64_t cols, DType dtype) {
  void* p =
      scratch(ws_[static_cast<size_t>(slot)], static_cast<size_t>(rows * cols) * dtype_size(dtype));
  return Tensor::wrap(p, {rows, cols}, dtype, ws_[static_cast<size_t>(slot)].owner(), device());
}

}  // namespace tachyon::cuda
