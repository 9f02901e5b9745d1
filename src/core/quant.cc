#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/logging.h"

namespace tachyon {
namespace {

// The owner of a typed view: the matrix it views (std::get_deleter finds the deleter
// type, which marks a quantized view).
struct QuantOwnerDeleter {
  std::shared_ptr<const QuantizedMatrix> matrix;
  void operator()(const void*) const {}
};

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

void expect(const Tensor& t, const Shape& shape, DType dtype, const QuantizedMatrix& m,
            const char* what) {
  if (!t) raise<InvalidArgument>("quantized matrix {}: {} is missing", m.str(), what);
  if (t.shape() != shape || t.dtype() != dtype)
    raise<InvalidArgument>("quantized matrix {}: {} is {}, expected {}[{}]", m.str(), what, t.str(),
                           dtype_name(dtype), shape_str(shape).substr(1));
}

// Checks that w is a 2-d f32 / f16 / bf16 host matrix.
void check_dense(const Tensor& w, const char* what) {
  if (!w || w.ndim() != 2 || !w.device().is_cpu() ||
      (w.dtype() != DType::kF32 && w.dtype() != DType::kF16 && w.dtype() != DType::kBF16))
    raise<InvalidArgument>("{}: {} is not a 2-d f32/f16/bf16 host matrix", what,
                           w ? w.str() : std::string("none"));
}

// Row i of w (f32, f16 or bf16) as f32 into out [k]; a non-finite value is an error.
void row_floats(const Tensor& w, int64_t i, float* out, const char* what) {
  const int64_t k = w.dim(1);
  if (w.dtype() == DType::kF32) {
    std::memcpy(out, w.data<float>() + i * k, static_cast<size_t>(k) * sizeof(float));
  } else if (w.dtype() == DType::kBF16) {
    const auto* src = static_cast<const uint16_t*>(w.raw()) + i * k;
    for (int64_t j = 0; j < k; ++j) {
      const uint32_t b = uint32_t{src[j]} << 16;
      std::memcpy(out + j, &b, sizeof(float));
    }
  } else {
    const auto* src = static_cast<const f16*>(w.raw()) + i * k;
    for (int64_t j = 0; j < k; ++j) out[j] = f16_to_f32(src[j]);
  }
  bool ok = true;
  for (int64_t j = 0; j < k; ++j) ok &= std::isfinite(out[j]);
  if (!ok) raise<InvalidArgument>("{}: row {} of {} holds a non-finite value", what, i, w.str());
}

// std::lround(y) for |y| < 2^23, in a form the compiler vectorizes: the truncation of
// |y| plus one where the (exact) remainder is at least a half.
inline int32_t round_half_away(float y) {
  const float a = std::fabs(y);
  int32_t r = static_cast<int32_t>(a);
  r += a - static_cast<float>(r) >= 0.5f ? 1 : 0;
  return y < 0.f ? -r : r;
}

// q[j] = clamp(round(x[j] / scale) + zero, 0, maxq) for a group of n values; returns
// the squared error of the values they stand for.
inline float quantize_group(const float* x, int64_t n, float scale, int32_t zero, int32_t maxq,
                            int32_t* q) {
  float err = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    q[j] = std::clamp(round_half_away(x[j] / scale) + zero, 0, maxq);
    const float d = static_cast<float>(q[j] - zero) * scale - x[j];
    err += d * d;
  }
  return err;
}

}  // namespace

uint32_t QuantizedMatrix::value(int64_t i, int64_t j) const {
  return packed_int(q.data<uint8_t>() + i * row_bytes(), bits, j);
}

std::shared_ptr<QuantizedMatrix> make_int_matrix(int64_t n, int64_t k, int32_t bits,
                                                 int64_t group_size) {
  auto m = std::make_shared<QuantizedMatrix>();
  m->scheme = QuantScheme::kInt;
  m->n = n;
  m->k = k;
  m->bits = bits;
  m->group_size = group_size;
  m->q = Tensor::zeros({n, m->row_bytes()}, DType::kU8);
  m->scales = Tensor::empty({n, m->groups()}, DType::kF32);
  m->zeros = Tensor::empty({n, m->groups()}, DType::kU8);
  return m;
}

size_t QuantizedMatrix::nbytes() const {
  size_t b = 0;
  for (const Tensor* t : {&q, &scales, &zeros, &perm})
    if (*t) b += t->nbytes();
  return b;
}

std::string QuantizedMatrix::str() const {
  std::string shape = fmt::format("[{}, {}]", n, k);
  if (scheme == QuantScheme::kFp8) {
    if (block_n == 1 && block_k == k) return "fp8 per-channel " + shape;
    if (block_n == n && block_k == k) return "fp8 per-tensor " + shape;
    return fmt::format("fp8 block {}x{} {}", block_n, block_k, shape);
  }
  std::string g = group_size == k ? "per-channel" : fmt::format("g{}", group_size);
  return fmt::format("int{} {}{}{} {}", bits, g, symmetric ? " sym" : "", perm ? " act-order" : "",
                     shape);
}

void QuantizedMatrix::validate() const {
  if (n <= 0 || k <= 0) raise<InvalidArgument>("quantized matrix: shape [{}, {}]", n, k);
  if (scheme == QuantScheme::kFp8) {
    if (bits != 8) raise<InvalidArgument>("quantized matrix {}: fp8 with {} bits", str(), bits);
    if (block_n <= 0 || block_k <= 0)
      raise<InvalidArgument>("quantized matrix {}: block {}x{}", str(), block_n, block_k);
    expect(q, {n, k}, DType::kF8E4M3, *this, "the values");
    expect(scales, {ceil_div(n, block_n), ceil_div(k, block_k)}, DType::kF32, *this, "the scales");
    if (zeros || perm)
      raise<InvalidArgument>("quantized matrix {}: fp8 takes no zeros or perm", str());
    return;
  }
  if (bits != 4 && bits != 8)
    raise<InvalidArgument>("quantized matrix [{}, {}]: {} bits (4 or 8 are supported)", n, k, bits);
  if (bits == 4 && k % 2 != 0)
    raise<InvalidArgument>("quantized matrix {}: 4-bit rows of odd length", str());
  if (group_size <= 0 || k % group_size != 0)
    raise<InvalidArgument>("quantized matrix [{}, {}]: group size {} does not divide {}", n, k,
                           group_size, k);
  expect(q, {n, k * bits / 8}, DType::kU8, *this, "the values");
  expect(scales, {n, groups()}, DType::kF32, *this, "the scales");
  expect(zeros, {n, groups()}, DType::kU8, *this, "the zeros");
  if (perm) expect(perm, {k}, DType::kI32, *this, "the permutation");
  for (const Tensor* t : {&scales, &zeros, &perm})
    if (*t && t->device() != q.device())
      raise<InvalidArgument>("quantized matrix {}: parts on different devices", str());
  if (!q.device().is_cpu()) return;
  const uint32_t top = 1u << bits;
  const auto* z = zeros.data<uint8_t>();
  for (int64_t i = 0; i < zeros.numel(); ++i) {
    if (z[i] >= top)
      raise<InvalidArgument>("quantized matrix {}: zero {} at {} is not below {}", str(), z[i], i,
                             top);
    if (symmetric && z[i] != top / 2)
      raise<InvalidArgument>("quantized matrix {}: symmetric with zero {} at {}", str(), z[i], i);
  }
  if (perm) {
    std::vector<uint8_t> seen(static_cast<size_t>(k), 0);
    const auto* p = perm.data<int32_t>();
    for (int64_t j = 0; j < k; ++j) {
      if (p[j] < 0 || p[j] >= k || seen[static_cast<size_t>(p[j])])
        raise<InvalidArgument>(
            "quantized matrix {}: the permutation repeats or leaves [0, {}) "
            "at {}",
            str(), k, j);
      seen[static_cast<size_t>(p[j])] = 1;
    }
  }
}

Tensor quantized_view(std::shared_ptr<const QuantizedMatrix> m) {
  TACHYON_CHECK(m && m->q, "quantized_view of an empty matrix");
  void* data = const_cast<void*>(m->q.raw());
  const Shape shape{m->n, m->k};
  const DType dtype = m->scheme == QuantScheme::kFp8 ? DType::kF8E4M3 : DType::kU8;
  const Device device = m->device();
  std::shared_ptr<void> owner(data, QuantOwnerDeleter{std::move(m)});
  return Tensor::wrap(data, shape, dtype, std::move(owner), device);
}

std::shared_ptr<const QuantizedMatrix> quantized_ptr(const Tensor& t) {
  if (!t) return nullptr;
  const auto* d = std::get_deleter<QuantOwnerDeleter>(t.owner());
  if (d == nullptr) return nullptr;
  const QuantizedMatrix& m = *d->matrix;
  TACHYON_CHECK(t.raw() == m.q.raw() && t.shape() == Shape({m.n, m.k}),
                "{} is a view of part of the quantized matrix {}", t.str(), m.str());
  return d->matrix;
}

const QuantizedMatrix* quantized(const Tensor& t) {
  return quantized_ptr(t).get();
}

void dequantize_rows(const QuantizedMatrix& m, int64_t r0, int64_t r1, float* out) {
  TACHYON_CHECK(m.device().is_cpu() && 0 <= r0 && r0 <= r1 && r1 <= m.n,
                "dequantize_rows [{}, {}) of {} on {}", r0, r1, m.str(), m.device().str());
  const auto* p = m.perm ? m.perm.data<int32_t>() : nullptr;
  const auto* s = m.scales.data<float>();
  for (int64_t i = r0; i < r1; ++i) {
    float* o = out + (i - r0) * m.k;
    if (m.scheme == QuantScheme::kFp8) {
      const auto* row = m.q.data<uint8_t>() + i * m.k;
      const float* srow = s + (i / m.block_n) * m.scales.dim(1);
      for (int64_t j = 0; j < m.k; ++j) o[j] = e4m3_to_f32(row[j]) * srow[j / m.block_k];
      continue;
    }
    const auto* row = m.q.data<uint8_t>() + i * m.row_bytes();
    const int64_t g = m.groups();
    const float* srow = s + i * g;
    const uint8_t* zrow = m.zeros.data<uint8_t>() + i * g;
    for (int64_t j = 0; j < m.k; ++j) {
      const int64_t grp = j / m.group_size;
      const float v = (static_cast<float>(packed_int(row, m.bits, j)) - zrow[grp]) * srow[grp];
      o[p ? p[j] : j] = v;
    }
  }
}

Tensor dequantize(const QuantizedMatrix& m) {
  Tensor out = Tensor::empty({m.n, m.k}, DType::kF32);
  dequantize_rows(m, 0, m.n, out.data<float>());
  return out;
}

std::shared_ptr<QuantizedMatrix> stack_quantized_rows(
    std::span<const QuantizedMatrix* const> parts) {
  if (parts.empty()) return nullptr;
  const QuantizedMatrix& a = *parts.front();
  const bool fp8 = a.scheme == QuantScheme::kFp8;
  // FP8 parts with one scale per row or per matrix stack as one scale per row.
  bool rowwise = fp8;
  int64_t rows = 0;
  for (const QuantizedMatrix* p : parts) {
    if (p->scheme != a.scheme || p->bits != a.bits || p->k != a.k ||
        p->group_size != a.group_size || !p->device().is_cpu() ||
        static_cast<bool>(p->perm) != static_cast<bool>(a.perm))
      return nullptr;
    if (p->perm && std::memcmp(p->perm.raw(), a.perm.raw(), a.perm.nbytes()) != 0) return nullptr;
    rowwise = rowwise && p->block_k == p->k && (p->block_n == 1 || p->block_n == p->n);
    rows += p->n;
  }
  if (fp8 && !rowwise)
    for (const QuantizedMatrix* p : parts)
      if (p->block_n != a.block_n || p->block_k != a.block_k || p->n % p->block_n != 0)
        return nullptr;
  auto out = std::make_shared<QuantizedMatrix>(a);
  out->n = rows;
  auto stack = [&](Tensor QuantizedMatrix::*field) {
    const Tensor& first = a.*field;
    int64_t total = 0;
    for (const QuantizedMatrix* p : parts) total += (p->*field).dim(0);
    Tensor t = Tensor::empty({total, first.dim(1)}, first.dtype());
    auto* dst = static_cast<char*>(t.raw());
    for (const QuantizedMatrix* p : parts) {
      std::memcpy(dst, (p->*field).raw(), (p->*field).nbytes());
      dst += (p->*field).nbytes();
    }
    (*out).*field = std::move(t);
  };
  stack(&QuantizedMatrix::q);
  if (!fp8) {
    stack(&QuantizedMatrix::scales);
    stack(&QuantizedMatrix::zeros);
    for (const QuantizedMatrix* p : parts) out->symmetric = out->symmetric && p->symmetric;
  } else if (!rowwise) {
    stack(&QuantizedMatrix::scales);
  } else {
    out->block_n = 1;
    out->scales = Tensor::empty({rows, 1}, DType::kF32);
    float* s = out->scales.data<float>();
    for (const QuantizedMatrix* p : parts)
      for (int64_t i = 0; i < p->n; ++i) *s++ = p->scales.data<float>()[i / p->block_n];
  }
  return out;
}

std::shared_ptr<QuantizedMatrix> quantize_int(const Tensor& w, int32_t bits, int64_t group_size,
                                              bool symmetric) {
  check_dense(w, "quantize_int");
  const int64_t n = w.dim(0), k = w.dim(1);
  if (bits != 4 && bits != 8)
    raise<InvalidArgument>("quantize_int: {} bits (4 or 8 are supported)", bits);
  if (group_size <= 0 || k % group_size != 0 || (bits == 4 && k % 2 != 0))
    raise<InvalidArgument>("quantize_int: group size {} does not divide {} columns", group_size, k);
  auto m = make_int_matrix(n, k, bits, group_size);
  m->symmetric = symmetric;
  const int64_t g = m->groups();
  const int32_t maxq = (1 << bits) - 1, mid = 1 << (bits - 1);
  std::vector<float> x(static_cast<size_t>(k));
  std::vector<int32_t> q(static_cast<size_t>(k)), trial(static_cast<size_t>(group_size));
  for (int64_t i = 0; i < n; ++i) {
    row_floats(w, i, x.data(), "quantize_int");
    for (int64_t gi = 0; gi < g; ++gi) {
      const float* xs = x.data() + gi * group_size;
      int32_t* qs = q.data() + gi * group_size;
      float lo = 0.f, hi = 0.f;
      for (int64_t j = 0; j < group_size; ++j) {
        lo = std::min(lo, xs[j]);
        hi = std::max(hi, xs[j]);
      }
      float scale;
      int32_t zero = mid;
      if (symmetric) {
        scale = std::max(-lo, hi) / static_cast<float>(mid - 1);
      } else {
        scale = (hi - lo) / static_cast<float>(maxq);
        if (scale > 0.f) zero = std::clamp(round_half_away(-lo / scale), 0, maxq);
      }
      if (!(scale > 0.f)) scale = 1.f;  // an all-zero group
      float best = quantize_group(xs, group_size, scale, zero, maxq, qs);
      if (symmetric && bits == 4) {
        // Sixteen levels are few: a range clipped below the largest value often
        // represents the rest better. The scale of least squared error wins.
        const float full = scale;
        for (int step = 1; step <= 6; ++step) {
          const float s = full * (1.f - 0.05f * static_cast<float>(step));
          const float e = quantize_group(xs, group_size, s, zero, maxq, trial.data());
          if (e < best) {
            best = e;
            scale = s;
            std::copy(trial.begin(), trial.end(), qs);
          }
        }
      }
      m->scales.data<float>()[i * g + gi] = scale;
      m->zeros.data<uint8_t>()[i * g + gi] = static_cast<uint8_t>(zero);
    }
    uint8_t* row = m->q.data<uint8_t>() + i * m->row_bytes();
    for (int64_t j = 0; j < k; ++j)
      set_packed_int(row, bits, j, static_cast<uint32_t>(q[static_cast<size_t>(j)]));
  }
  return m;
}

std::shared_ptr<QuantizedMatrix> quantize_fp8(const Tensor& w, int64_t block_n, int64_t block_k) {
  check_dense(w, "quantize_fp8");
  const int64_t n = w.dim(0), k = w.dim(1);
  if (block_n <= 0 || block_k <= 0)
    raise<InvalidArgument>("quantize_fp8: block {}x{}", block_n, block_k);
  auto m = std::make_shared<QuantizedMatrix>();
  m->scheme = QuantScheme::kFp8;
  m->n = n;
  m->k = k;
  m->bits = 8;
  m->block_n = std::min(block_n, n);
  m->block_k = std::min(block_k, k);
  const int64_t bn = ceil_div(n, m->block_n), bk = ceil_div(k, m->block_k);
  m->q = Tensor::empty({n, k}, DType::kF8E4M3);
  m->scales = Tensor::empty({bn, bk}, DType::kF32);
  std::vector<float> x(static_cast<size_t>(m->block_n * k));
  for (int64_t bi = 0; bi < bn; ++bi) {
    const int64_t i0 = bi * m->block_n, rows = std::min(n, i0 + m->block_n) - i0;
    for (int64_t r = 0; r < rows; ++r) row_floats(w, i0 + r, x.data() + r * k, "quantize_fp8");
    for (int64_t bj = 0; bj < bk; ++bj) {
      const int64_t j0 = bj * m->block_k, j1 = std::min(k, j0 + m->block_k);
      float amax = 0.f;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(x[r * k + j]));
      const float scale = amax > 0.f ? amax / 448.f : 1.f;
      m->scales.data<float>()[bi * bk + bj] = scale;
      for (int64_t r = 0; r < rows; ++r) {
        uint8_t* out = m->q.data<uint8_t>() + (i0 + r) * k;
        for (int64_t j = j0; j < j1; ++j) out[j] = f32_to_e4m3(x[r * k + j] / scale);
      }
    }
  }
  return m;
}

}  // namespace tachyon
