#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/packed_weight.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/vec.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon {

std::unique_ptr<Backend> make_cpu_backend(DType kv_dtype) {
  return std::make_unique<cpu::CpuBackend>(nullptr, std::nullopt, kv_dtype);
}

namespace cpu {
namespace {

void check_f32_2d(const Tensor& t, const char* what) {
  TACHYON_CHECK(t && t.dtype() == DType::kF32 && t.ndim() == 2,
                "{} must be a 2-d f32 tensor, got {}", what, t ? t.str() : std::string("none"));
}

// Rows per parallel chunk so that each chunk has at least ~16k elements of work.
int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols));
}

}  // namespace

CpuBackend::CpuBackend(ThreadPool* pool, std::optional<CpuIsa> isa, DType kv_dtype)
    : pool_(pool != nullptr ? *pool : ThreadPool::global()),
      isa_(isa.value_or(active_cpu_isa())),
      kv_dtype_(kv_dtype) {
  TACHYON_CHECK(cpu_isa_supported(isa_), "this CPU cannot run the {} path", cpu_isa_name(isa_));
  if (!cpu_kv_dtype(kv_dtype))
    raise<InvalidArgument>("the CPU keeps its KV cache in f32, bf16, fp8 (e4m3) or int8, not {}",
                           dtype_name(kv_dtype));
}

Tensor CpuBackend::alloc(const Shape& shape, DType dtype) {
  // The paged KV cache ([blocks, kv heads, block size, head dim], the only 4-d buffer
  // the decoder allocates) in 2 MiB pages where the kernel allows it (transparent huge
  // pages on madvise): attention and KV writes jump between blocks a few KiB apart, and
  // in 4 KiB pages every block costs a TLB miss, which in a virtual machine is a
  // two-level page walk. Measured: decode attention and KV writes ~3-6x faster. Buffers
  // allocated every step (logits) stay on the heap: no page faults or compaction there.
  if (shape.size() == 4) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    std::shared_ptr<void> memory = alloc_large(bytes);
    return Tensor::wrap(memory.get(), shape, dtype, memory);
  }
  return Tensor::empty(shape, dtype);
}

bool CpuBackend::repacks_linear_weights() const {
  // The AVX-512 kernels read packed weights with no per-call conversion pass (faster
  // from about 17 rows of x on, as fast below); the other paths read the checkpoint.
  return isa_ == CpuIsa::kAvx512;
}

Tensor CpuBackend::prepare_weight(const Tensor& host) {
  if (quantized(host) != nullptr) return pack_quantized_weight(host, pool_);
  return host;
}

Tensor CpuBackend::prepare_linear_weight(const Tensor& host) {
  if (quantized(host) != nullptr) return pack_quantized_weight(host, pool_);
  if (!repacks_linear_weights()) return host;
  return pack_linear_weight(host, pool_);
}

void CpuBackend::product(const float* x, int64_t m, int64_t k, int64_t ldx, const Tensor& w,
                         const float* bias, float* y, int64_t ldy) {
  TACHYON_CHECK(w.ndim() == 2 && w.dim(1) == k, "weight {} for {} input columns", w.str(), k);
  if (const QPackedWeight* q = packed_quantized(w))
    return qgemm(isa_, x, m, ldx, *q, bias, y, ldy, pool_);
  if (quantized(w) != nullptr) {
    // Not prepared: packed for this call.
    const Tensor packed = pack_quantized_weight(w, pool_);
    return qgemm(isa_, x, m, ldx, *packed_quantized(packed), bias, y, ldy, pool_);
  }
  const GemmWeight e{w.raw(), w.dtype(), w.dim(0), bias, y, ldy, is_packed_weight(w)};
  gemm_xwt_multi_isa(isa_, x, m, k, ldx, {&e, 1}, &pool_);
}

Tensor CpuBackend::upload(const void* data, const Shape& shape, DType dtype, Tensor reuse) {
  const int64_t n = shape_numel(shape);
  if (!reuse || reuse.dtype() != dtype || reuse.numel() < n)
    reuse = Tensor::empty({std::max<int64_t>(n, 1)}, dtype);
  if (n > 0) std::memcpy(reuse.raw(), data, static_cast<size_t>(n) * dtype_size(dtype));
  return Tensor::wrap(reuse.raw(), shape, dtype, reuse.owner());
}

void CpuBackend::download(const Tensor& src, void* dst) {
  std::memcpy(dst, src.raw(), src.nbytes());
}

void CpuBackend::fill_zero(Tensor& t) {
  std::memset(t.raw(), 0, t.nbytes());
}

void CpuBackend::embedding(const Tensor& table, const Tensor& ids, int32_t id_offset, float scale,
                           bool accumulate, Tensor& out) {
  TACHYON_CHECK(table.ndim() == 2, "embedding table {}", table.str());
  check_f32_2d(out, "embedding out");
  const int64_t n = ids.numel(), d = table.dim(1), v = table.dim(0);
  TACHYON_CHECK(out.dim(0) == n && out.dim(1) == d, "embedding out {} for {} ids of dim {}",
                out.str(), n, d);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    int64_t row = int64_t{id[t]} + id_offset;
    TACHYON_CHECK(row >= 0 && row < v, "embedding id {} (offset {}) out of [0, {})", id[t],
                  id_offset, v);
  }
  const auto* base = static_cast<const uint8_t*>(table.raw());
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(table.dtype());
  float* o = out.data<float>();
  pool_.parallel_for(0, n, row_grain(d), [&](int64_t t0, int64_t t1) {
    std::vector<float> tmp(accumulate || scale != 1.f ? static_cast<size_t>(d) : 0);
    for (int64_t t = t0; t < t1; ++t) {
      const void* src = base + static_cast<size_t>(int64_t{id[t]} + id_offset) * row_bytes;
      float* dst = o + t * d;
      if (!accumulate && scale == 1.f) {
        convert_row(src, table.dtype(), d, dst);
        continue;
      }
      convert_row(src, table.dtype(), d, tmp.data());
      if (accumulate) {
        axpy(scale, tmp.data(), dst, d);
      } else {
        for (int64_t i = 0; i < d; ++i) dst[i] = scale * tmp[i];
      }
    }
  });
}

namespace {

// Normalises one row in place into `out` (which may alias `x`).
inline void norm_row(const float* x, float* out, int64_t d, const NormParams& p) {
  const float* w = p.weight.data<float>();
  const float* b = p.bias ? p.bias.data<float>() : nullptr;
  const float off = p.weight_offset;
  const double n = static_cast<double>(d);
  const double mean = p.type == NormType::kRMSNorm ? 0.0 : sum_f64(x, d) / n;
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_squares_f64(x, d, mean) / n + p.eps));
  const float m = static_cast<float>(mean);
  if (b == nullptr) {
    for (int64_t i = 0; i < d; ++i) out[i] = (x[i] - m) * inv * (off + w[i]);
  } else {
    for (int64_t i = 0; i < d; ++i) out[i] = (x[i] - m) * inv * (off + w[i]) + b[i];
  }
}

void check_norm(const NormParams& p, int64_t d) {
  TACHYON_CHECK(p.weight && p.weight.dtype() == DType::kF32 && p.weight.numel() == d,
                "norm weight {} for dim {}", p.weight ? p.weight.str() : std::string("none"), d);
  TACHYON_CHECK(!p.bias || (p.bias.dtype() == DType::kF32 && p.bias.numel() == d), "norm bias {}",
                p.bias.str());
}

}  // namespace

void CpuBackend::add_norm(Tensor& residual, const Tensor& delta1, const Tensor& delta2,
                          const NormParams& norm, Tensor& out) {
  check_f32_2d(residual, "add_norm residual");
  check_f32_2d(out, "add_norm out");
  const int64_t n = residual.dim(0), d = residual.dim(1);
  TACHYON_CHECK(out.shape() == residual.shape(), "add_norm out {} vs {}", out.str(),
                residual.str());
  for (const Tensor* t : {&delta1, &delta2})
    TACHYON_CHECK(!*t || t->shape() == residual.shape(), "add_norm delta {} vs {}", t->str(),
                  residual.str());
  check_norm(norm, d);
  float* r = residual.data<float>();
  float* o = out.data<float>();
  const float* d1 = delta1 ? delta1.data<float>() : nullptr;
  const float* d2 = delta2 ? delta2.data<float>() : nullptr;
  pool_.parallel_for(0, n, row_grain(d), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* rr = r + t * d;
      if (d1 != nullptr)
        for (int64_t i = 0; i < d; ++i) rr[i] += d1[t * d + i];
      if (d2 != nullptr)
        for (int64_t i = 0; i < d; ++i) rr[i] += d2[t * d + i];
      norm_row(rr, o + t * d, d, norm);
    }
  });
}

void CpuBackend::qk_norm(Tensor& qkv, const QkvLayout& layout, const NormParams& q_norm,
                         const NormParams& k_norm) {
  check_f32_2d(qkv, "qk_norm qkv");
  TACHYON_CHECK_EQ(qkv.dim(1), layout.row_cols());
  const int64_t hd = layout.head_dim;
  check_norm(q_norm, hd);
  check_norm(k_norm, hd);
  const int64_t n = qkv.dim(0), cols = qkv.dim(1);
  const int heads = layout.num_heads + layout.num_kv_heads;
  float* base = qkv.data<float>();
  pool_.parallel_for(0, n, row_grain(cols), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int h = 0; h < heads; ++h) {
        float* v = base + t * cols + h * hd;
        norm_row(v, v, hd, h < layout.num_heads ? q_norm : k_norm);
      }
    }
  });
}

void CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                        int64_t col_offset, Activation act) {
  check_f32_2d(x, "linear x");
  check_f32_2d(out, "linear out");
  TACHYON_CHECK(w.ndim() == 2, "linear weight {}", w.str());
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  TACHYON_CHECK(w.dim(1) == k, "linear weight {} for input {}", w.str(), x.str());
  TACHYON_CHECK(out.dim(0) == m && col_offset >= 0 && out.dim(1) >= col_offset + n,
                "linear out {} for {} columns at {}", out.str(), n, col_offset);
  TACHYON_CHECK(!bias || (bias.dtype() == DType::kF32 && bias.numel() == n), "linear bias {}",
                bias.str());
  if (m == 0) return;
  const int64_t ldy = out.dim(1);
  float* y = out.data<float>() + col_offset;
  product(x.data<float>(), m, k, k, w, bias ? bias.data<float>() : nullptr, y, ldy);
  if (act != Activation::kIdentity) {
    pool_.parallel_for(0, m, row_grain(n), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) activate(y + t * ldy, n, act);
    });
  }
}

void CpuBackend::gated_activation(const Tensor& in, Activation act, Tensor& out) {
  check_f32_2d(in, "gated in");
  check_f32_2d(out, "gated out");
  const int64_t n = in.dim(0), i2 = in.dim(1), i1 = out.dim(1);
  TACHYON_CHECK(out.dim(0) == n && i2 == 2 * i1, "gated_activation {} -> {}", in.str(), out.str());
  const float* src = in.data<float>();
  float* dst = out.data<float>();
  pool_.parallel_for(0, n, row_grain(i2), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) gated(src + t * i2, src + t * i2 + i1, dst + t * i1, i1, act);
  });
}

void CpuBackend::activation(Tensor& x, Activation act) {
  if (act == Activation::kIdentity) return;
  float* p = x.data<float>();
  const int64_t n = x.numel();
  pool_.parallel_for(0, n, 16384, [&](int64_t a, int64_t b) { activate(p + a, b - a, act); });
}

void CpuBackend::scale_add(const Tensor& a, float scale, const Tensor& b, Tensor& out) {
  TACHYON_CHECK(a.shape() == b.shape() && a.shape() == out.shape(), "add {} {} {}", a.str(),
                b.str(), out.str());
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  pool_.parallel_for(0, a.numel(), 16384, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) po[i] = scale * pa[i] + pb[i];
  });
}

void CpuBackend::softcap(Tensor& x, float cap) {
  TACHYON_CHECK(cap > 0.f, "softcap {}", cap);
  float* p = x.data<float>();
  pool_.parallel_for(0, x.numel(), 16384, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) p[i] = cap * std::tanh(p[i] / cap);
  });
}

void CpuBackend::clamp(Tensor& x, float limit) {
  float* p = x.data<float>();
  pool_.parallel_for(0, x.numel(), 16384, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) p[i] = std::min(limit, std::max(-limit, p[i]));
  });
}

void CpuBackend::gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) {
  check_f32_2d(src, "gather src");
  check_f32_2d(out, "gather out");
  const int64_t r = rows.numel(), n = src.dim(1);
  TACHYON_CHECK(out.dim(0) == r && out.dim(1) == n, "gather_rows out {} for {} rows of {}",
                out.str(), r, src.str());
  const int32_t* idx = rows.data<int32_t>();
  for (int64_t i = 0; i < r; ++i) {
    TACHYON_CHECK(idx[i] >= 0 && idx[i] < src.dim(0), "gather row {} of {}", idx[i], src.dim(0));
    std::memcpy(out.data<float>() + i * n, src.data<float>() + int64_t{idx[i]} * n,
                static_cast<size_t>(n) * 4);
  }
}

void CpuBackend::scatter_rows(const Tensor& src, const Tensor& rows, Tensor& out) {
  check_f32_2d(src, "scatter_rows src");
  check_f32_2d(out, "scatter_rows out");
  const int64_t n = src.dim(0), d = src.dim(1);
  TACHYON_CHECK(rows.dtype() == DType::kI32 && rows.numel() == n && out.dim(1) == d,
                "scatter_rows src {} rows {} out {}", src.str(), rows.str(), out.str());
  const int32_t* idx = rows.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= out.dim(0)) continue;
    std::memcpy(out.data<float>() + int64_t{idx[i]} * d, src.data<float>() + i * d,
                static_cast<size_t>(d) * 4);
  }
}

void CpuBackend::scatter_ids(const Tensor& src, const Tensor& pairs, Tensor& ids) {
  TACHYON_CHECK(src.dtype() == DType::kI32 && pairs.dtype() == DType::kI32 &&
                    ids.dtype() == DType::kI32 && pairs.numel() % 2 == 0,
                "scatter_ids src {} pairs {} ids {}", src.str(), pairs.str(), ids.str());
  const int32_t* s = src.data<int32_t>();
  const int32_t* p = pairs.data<int32_t>();
  int32_t* out = ids.data<int32_t>();
  for (int64_t j = 0; j < pairs.numel() / 2; ++j) {
    const int32_t dst = p[2 * j], from = p[2 * j + 1];
    if (dst < 0 || dst >= ids.numel() || from < 0 || from >= src.numel()) continue;
    out[dst] = s[from] >= 0 ? s[from] : 0;
  }
}

void CpuBackend::add_sigmoid_gated(const Tensor& src, const Tensor& gate_logit, Tensor& out) {
  TACHYON_CHECK(src.shape() == out.shape() && gate_logit.numel() == src.dim(0),
                "add_sigmoid_gated {} {} {}", src.str(), gate_logit.str(), out.str());
  const int64_t n = src.dim(0), d = src.dim(1);
  const float* s = src.data<float>();
  const float* g = gate_logit.data<float>();
  float* o = out.data<float>();
  pool_.parallel_for(0, n, row_grain(d), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float a = 1.f / (1.f + std::exp(-g[t]));
      axpy(a, s + t * d, o + t * d, d);
    }
  });
}

void CpuBackend::copy_blocks(Tensor& cache, const std::vector<std::pair<int32_t, int32_t>>& pairs) {
  if (!cache) return;
  const int64_t nb = cache.dim(0);
  const size_t block_bytes = cache.nbytes() / static_cast<size_t>(nb);
  auto* base = static_cast<uint8_t*>(cache.raw());
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || src >= nb || dst < 0 || dst >= nb)
      raise<InvalidArgument>("copy_kv_blocks: block pair ({}, {}) out of [0, {})", src, dst, nb);
    if (src != dst) std::memcpy(base + dst * block_bytes, base + src * block_bytes, block_bytes);
  }
}

void CpuBackend::copy_blocks_between(const Tensor& from, Tensor& to,
                                     const std::vector<std::pair<int32_t, int32_t>>& pairs) {
  const int64_t block_bytes = check_block_pairs(from, to, pairs);
  const auto* src = static_cast<const uint8_t*>(from.raw());
  auto* dst = static_cast<uint8_t*>(to.raw());
  for (const auto& [s, d] : pairs)
    std::memmove(dst + d * block_bytes, src + s * block_bytes, static_cast<size_t>(block_bytes));
}

void CpuBackend::argmax(const Tensor& logits, Tensor& ids) {
  check_f32_2d(logits, "argmax logits");
  const int64_t rows = logits.dim(0), v = logits.dim(1);
  TACHYON_CHECK(ids.dtype() == DType::kI32 && ids.numel() == rows, "argmax ids {}", ids.str());
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = logits.data<float>() + r * v;
    int32_t best = v > 0 ? 0 : -1;
    for (int64_t j = 0; j < v && best >= 0; ++j) {
      if (std::isnan(p[j]))
        best = -1;
      else if (p[j] > p[best])
        best = static_cast<int32_t>(j);
    }
    ids.data<int32_t>()[r] = best;
  }
}

void CpuBackend::log_softmax(Tensor& logits) {
  check_f32_2d(logits, "log_softmax");
  const int64_t rows = logits.dim(0), v = logits.dim(1);
  pool_.parallel_for(0, rows, row_grain(v), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* p = logits.data<float>() + r * v;
      const float mx = *std::max_element(p, p + v);
      double sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += std::exp(double{p[j]} - mx);
      const float lse = mx + static_cast<float>(std::log(sum));
      for (int64_t j = 0; j < v; ++j) p[j] -= lse;
    }
  });
}

}  // namespace cpu
}  // namespace tachyon
