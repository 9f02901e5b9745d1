// CudaBackend ops: embedding, norms and the elementwise ops (shape checks on the host,
// then the kernels of kernels.h on the backend's stream). The products are in
// cuda_linear.cc, rotary, the KV cache and attention in cuda_attention.cc.
#include <algorithm>
#include <set>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/invariant_kernels.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace tachyon::cuda {

void CudaBackend::embedding(const Tensor& table, const Tensor& ids, int32_t id_offset, float scale,
                            bool accumulate, Tensor& out) {
  wrote(out);
  check_here(table, "embedding table");
  check_here(ids, "embedding ids");
  check_here(out, "embedding out");
  TACHYON_CHECK(out.dtype() == dtype_ || out.dtype() == DType::kF32,
                "embedding out {} is neither in the activation dtype {} nor f32", out.str(),
                dtype_name(dtype_));
  check_2d(table, "embedding table");
  check_2d(out, "embedding out");
  const int64_t n = ids.numel(), d = table.dim(1);
  TACHYON_CHECK(ids.dtype() == DType::kI32 && out.dim(0) == n && out.dim(1) == d,
                "embedding out {} for {} ids of dim {}", out.str(), n, d);
  launch_embedding(table.raw(), table.dtype(), table.dim(0), d, ids.data<int32_t>(), n, id_offset,
                   scale, accumulate, out.raw(), out.dtype(), err_dev_, stream_);
}

void CudaBackend::add_norm(Tensor& residual, const Tensor& delta1, const Tensor& delta2,
                           const NormParams& norm, Tensor& out) {
  wrote(residual);
  wrote(out);
  check_act(residual, "add_norm residual");
  check_act(out, "add_norm out");
  check_2d(residual, "add_norm residual");
  TACHYON_CHECK(out.shape() == residual.shape(), "add_norm out {} vs {}", out.str(),
                residual.str());
  for (const Tensor* t : {&delta1, &delta2}) {
    if (!*t) continue;
    check_act(*t, "add_norm delta");
    TACHYON_CHECK(t->shape() == residual.shape(), "add_norm delta {} vs {}", t->str(),
                  residual.str());
  }
  const int64_t d = residual.dim(1);
  launch_add_norm(residual.raw(), delta1 ? delta1.raw() : nullptr, delta2 ? delta2.raw() : nullptr,
                  dtype_, residual.dim(0), d, norm_args(norm, d), out.raw(), stream_);
}

void CudaBackend::qk_norm(Tensor& qkv, const QkvLayout& layout, const NormParams& q_norm,
                          const NormParams& k_norm) {
  wrote(qkv);
  check_act(qkv, "qk_norm qkv");
  check_2d(qkv, "qk_norm qkv");
  TACHYON_CHECK_EQ(qkv.dim(1), layout.row_cols());
  launch_qk_norm(qkv.raw(), dtype_, qkv.dim(0), qkv.dim(1), layout.num_heads, layout.num_kv_heads,
                 layout.head_dim, norm_args(q_norm, layout.head_dim),
                 norm_args(k_norm, layout.head_dim), stream_);
}

void CudaBackend::gated_activation(const Tensor& in, Activation act, Tensor& out) {
  wrote(out);
  check_act(in, "gated in");
  check_act(out, "gated out");
  check_2d(in, "gated in");
  check_2d(out, "gated out");
  TACHYON_CHECK(out.dim(0) == in.dim(0) && in.dim(1) == 2 * out.dim(1), "gated_activation {} -> {}",
                in.str(), out.str());
  launch_gated(in.raw(), out.raw(), dtype_, in.dim(0), out.dim(1), kact(act), stream_);
}

void CudaBackend::activation(Tensor& x, Activation act) {
  wrote(x);
  check_here(x, "activation");
  if (act == Activation::kIdentity || x.numel() == 0) return;
  launch_bias_act(x.raw(), x.dtype(), x.numel(), 1, x.numel(), nullptr, kact(act), stream_);
}

void CudaBackend::scale_add(const Tensor& a, float scale, const Tensor& b, Tensor& out) {
  wrote(out);
  check_here(a, "add a");
  check_here(b, "add b");
  check_here(out, "add out");
  TACHYON_CHECK(a.shape() == b.shape() && a.shape() == out.shape() && a.dtype() == b.dtype() &&
                    a.dtype() == out.dtype(),
                "add {} {} {}", a.str(), b.str(), out.str());
  launch_scale_add(a.raw(), scale, b.raw(), out.raw(), a.dtype(), a.numel(), stream_);
}

void CudaBackend::softcap(Tensor& x, float cap) {
  wrote(x);
  check_here(x, "softcap");
  TACHYON_CHECK(cap > 0.f, "softcap {}", cap);
  launch_softcap(x.raw(), x.dtype(), x.numel(), cap, stream_);
}

void CudaBackend::clamp(Tensor& x, float limit) {
  wrote(x);
  check_here(x, "clamp");
  launch_clamp(x.raw(), x.dtype(), x.numel(), limit, stream_);
}

void CudaBackend::gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) {
  wrote(out);
  check_here(src, "gather src");
  check_here(rows, "gather rows");
  check_here(out, "gather out");
  check_2d(src, "gather src");
  check_2d(out, "gather out");
  const int64_t r = rows.numel(), n = src.dim(1);
  TACHYON_CHECK(rows.dtype() == DType::kI32 && out.dim(0) == r && out.dim(1) == n &&
                    out.dtype() == src.dtype(),
                "gather_rows out {} for {} rows of {}", out.str(), r, src.str());
  launch_gather_rows(src.raw(), src.dtype(), src.dim(0), n, rows.data<int32_t>(), r, out.raw(),
                     err_dev_, stream_);
}

void CudaBackend::scatter_rows(const Tensor& src, const Tensor& rows, Tensor& out) {
  wrote(out);
  check_here(src, "scatter_rows src");
  check_here(rows, "scatter_rows rows");
  check_here(out, "scatter_rows out");
  check_2d(src, "scatter_rows src");
  check_2d(out, "scatter_rows out");
  TACHYON_CHECK(src.dtype() == DType::kF32 && rows.dtype() == DType::kI32 &&
                    rows.numel() == src.dim(0) && out.dim(1) == src.dim(1),
                "scatter_rows src {} rows {} out {}", src.str(), rows.str(), out.str());
  launch_scatter_rows(src.data<float>(), src.dim(0), src.dim(1), rows.data<int32_t>(), out.raw(),
                      out.dtype(), out.dim(0), stream_);
}

void CudaBackend::scatter_ids(const Tensor& src, const Tensor& pairs, Tensor& ids) {
  check_here(src, "scatter_ids src");
  check_here(pairs, "scatter_ids pairs");
  check_here(ids, "scatter_ids ids");
  TACHYON_CHECK(src.dtype() == DType::kI32 && pairs.dtype() == DType::kI32 &&
                    ids.dtype() == DType::kI32 && pairs.numel() % 2 == 0,
                "scatter_ids src {} pairs {} ids {}", src.str(), pairs.str(), ids.str());
  launch_scatter_ids(src.data<int32_t>(), src.numel(), pairs.data<int32_t>(), pairs.numel() / 2,
                     ids.data<int32_t>(), ids.numel(), stream_);
}

void CudaBackend::add_sigmoid_gated(const Tensor& src, const Tensor& gate_logit, Tensor& out) {
  wrote(out);
  check_here(src, "add_sigmoid_gated src");
  check_here(gate_logit, "add_sigmoid_gated gate");
  check_here(out, "add_sigmoid_gated out");
  TACHYON_CHECK(src.shape() == out.shape() && src.ndim() == 2 && gate_logit.numel() == src.dim(0) &&
                    src.dtype() == out.dtype() && gate_logit.dtype() == src.dtype(),
                "add_sigmoid_gated {} {} {}", src.str(), gate_logit.str(), out.str());
  launch_add_sigmoid_gated(src.raw(), gate_logit.raw(), src.dtype(), src.dim(0), src.dim(1),
                           out.raw(), stream_);
}

// ---- attention -------------------------------------------------------------------

// The slots [tokens] (i32) and the layer's caches that a KV write takes.
}  // namespace tachyon::cuda
