#include "model/load_quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace tachyon {

std::optional<LoadQuantization> parse_load_quantization(const std::string& spec) {
  if (spec.empty() || spec == "none" || spec == "auto" || spec == "fp16" || spec == "f16" ||
      spec == "bf16")
    return std::nullopt;
  if (spec == "int8") return LoadQuantization::kInt8;
  if (spec == "int4") return LoadQuantization::kInt4;
  if (spec == "fp8" || spec == "fp8_e4m3") return LoadQuantization::kFp8;
  raise<InvalidArgument>("quantization '{}' is not one of none, int8, int4, fp8", spec);
}

const char* load_quantization_name(LoadQuantization q) {
  switch (q) {
    case LoadQuantization::kInt8:
      return "int8";
    case LoadQuantization::kInt4:
      return "int4";
    case LoadQuantization::kFp8:
      return "fp8";
  }
  return "?";
}

namespace {

// Groups of 128 columns, else of 64 or 32 where those divide k (704 = 11 x 64), else
// one group per row.
int64_t int4_group(int64_t k) {
  for (int64_t g : {128, 64, 32})
    if (k % g == 0) return g;
  return k;
}

// Row i of w (f32, f16 or bf16) as f32 into out [k].
void row_floats(const Tensor& w, int64_t i, float* out) {
  const int64_t k = w.dim(1);
  switch (w.dtype()) {
    case DType::kF32:
      std::memcpy(out, w.data<float>() + i * k, static_cast<size_t>(k) * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* src = static_cast<const uint16_t*>(w.raw()) + i * k;
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t b = uint32_t{src[j]} << 16;
        std::memcpy(out + j, &b, sizeof(float));
      }
      return;
    }
    default:
      for (int64_t j = 0; j < k; ++j)
        out[j] = load_as_f32(w.raw(), w.dtype(), static_cast<size_t>(i * k + j));
  }
}

void check_finite(const float* x, int64_t k, const Tensor& w, int64_t i) {
  bool ok = true;
  for (int64_t j = 0; j < k; ++j) ok &= std::isfinite(x[j]);
  if (!ok)
    raise<InvalidArgument>("quantization at load: row {} of {} holds a non-finite value", i,
                           w.str());
}

}  // namespace

// core's quantize_int(w, bits, group, true), the same bits, in a form the compiler
// vectorizes.
std::shared_ptr<QuantizedMatrix> quantize_int_symmetric(const Tensor& w, int32_t bits,
                                                        int64_t group) {
  if (!w || w.ndim() != 2 || !w.device().is_cpu() ||
      (w.dtype() != DType::kF32 && w.dtype() != DType::kF16 && w.dtype() != DType::kBF16))
    raise<InvalidArgument>("quantization at load: {} is not a 2-d f32/f16/bf16 host matrix",
                           w ? w.str() : std::string("none"));
  const int64_t n = w.dim(0), k = w.dim(1);
  if ((bits != 4 && bits != 8) || group <= 0 || k % group != 0 || (bits == 4 && k % 2 != 0))
    raise<InvalidArgument>("quantization at load: int{} in groups of {} of {}", bits, group,
                           w.str());
  auto m = std::make_shared<QuantizedMatrix>();
  m->scheme = QuantScheme::kInt;
  m->n = n;
  m->k = k;
  m->bits = bits;
  m->group_size = group;
  m->symmetric = true;
  const int64_t g = k / group;
  m->q = Tensor::empty({n, k * bits / 8}, DType::kU8);
  m->scales = Tensor::empty({n, g}, DType::kF32);
  m->zeros = Tensor::empty({n, g}, DType::kU8);
  const int32_t zero = 1 << (bits - 1), maxq = (1 << bits) - 1;
  std::fill_n(m->zeros.data<uint8_t>(), n * g, static_cast<uint8_t>(zero));
  std::vector<float> x(static_cast<size_t>(k));
  std::vector<int32_t> q(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    row_floats(w, i, x.data());
    check_finite(x.data(), k, w, i);
    for (int64_t gi = 0; gi < g; ++gi) {
      const float* xs = x.data() + gi * group;
      float lo = 0.f, hi = 0.f;
      for (int64_t j = 0; j < group; ++j) {
        lo = std::min(lo, xs[j]);
        hi = std::max(hi, xs[j]);
      }
      float scale = std::max(-lo, hi) / static_cast<float>(zero - 1);
      if (!(scale > 0.f)) scale = 1.f;  // an all-zero group
      m->scales.data<float>()[i * g + gi] = scale;
      int32_t* qs = q.data() + gi * group;
      for (int64_t j = 0; j < group; ++j) {
        // lround(y): the truncation of |y|, plus one where the (exact) remainder is at
        // least a half.
        const float y = xs[j] / scale, a = std::fabs(y);
        int32_t r = static_cast<int32_t>(a);
        r += a - static_cast<float>(r) >= 0.5f ? 1 : 0;
        qs[j] = std::clamp((y < 0.f ? -r : r) + zero, 0, maxq);
      }
    }
    uint8_t* row = m->q.data<uint8_t>() + i * (k * bits / 8);
    if (bits == 8) {
      for (int64_t j = 0; j < k; ++j) row[j] = static_cast<uint8_t>(q[static_cast<size_t>(j)]);
    } else {
      for (int64_t j = 0; j < k / 2; ++j)
        row[j] = static_cast<uint8_t>(q[static_cast<size_t>(2 * j)] |
                                      q[static_cast<size_t>(2 * j + 1)] << 4);
    }
  }
  return m;
}

// core's f32_to_e4m3 for a finite f: round to nearest even on the 3 mantissa bits
// (subnormals: multiples of 2^-9), saturating at 448.
inline uint8_t e4m3_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint32_t sign = (u >> 24) & 0x80, a = u & 0x7fffffff;
  uint32_t v;
  if (a < 0x3c800000u) {  // below 2^-6: a multiple of 2^-9, rounded to even
    float s;
    std::memcpy(&s, &a, sizeof(s));
    v = static_cast<uint32_t>(std::nearbyint(s * 512.f));
  } else {
    const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1)) >> 20;  // 8 exponent + 3 mantissa bits
    v = r - ((127 - 7) << 3);
    if (a >= 0x43e00000u || v > 0x7e) v = 0x7e;  // 448 and above (and what rounds past it)
  }
  return static_cast<uint8_t>(sign | v);
}

// core's quantize_fp8(w, 1, k), the same bits.
std::shared_ptr<QuantizedMatrix> quantize_fp8_rows(const Tensor& w) {
  if (!w || w.ndim() != 2 || !w.device().is_cpu() ||
      (w.dtype() != DType::kF32 && w.dtype() != DType::kF16 && w.dtype() != DType::kBF16))
    raise<InvalidArgument>("quantization at load: {} is not a 2-d f32/f16/bf16 host matrix",
                           w ? w.str() : std::string("none"));
  const int64_t n = w.dim(0), k = w.dim(1);
  auto m = std::make_shared<QuantizedMatrix>();
  m->scheme = QuantScheme::kFp8;
  m->n = n;
  m->k = k;
  m->bits = 8;
  m->block_n = 1;
  m->block_k = k;
  m->q = Tensor::empty({n, k}, DType::kF8E4M3);
  m->scales = Tensor::empty({n, 1}, DType::kF32);
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    row_floats(w, i, x.data());
    check_finite(x.data(), k, w, i);
    float amax = 0.f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float scale = amax > 0.f ? amax / 448.f : 1.f;
    m->scales.data<float>()[i] = scale;
    uint8_t* row = m->q.data<uint8_t>() + i * k;
    for (int64_t j = 0; j < k; ++j) row[j] = e4m3_of(x[j] / scale);
  }
  return m;
}

namespace {

std::shared_ptr<QuantizedMatrix> quantize_one(const Tensor& w, LoadQuantization q) {
  const int64_t k = w.dim(1);
  switch (q) {
    case LoadQuantization::kInt8:
      return quantize_int_symmetric(w, 8, k);
    case LoadQuantization::kInt4:
      return quantize_int_symmetric(w, 4, int4_group(k));
    case LoadQuantization::kFp8:
      return quantize_fp8_rows(w);
  }
  return nullptr;
}

}  // namespace

void quantize_at_load(ModelWeights& w, LoadQuantization q, ThreadPool& pool) {
  std::vector<Tensor*> mats;
  for (LayerWeights& L : w.layers) {
    for (LinearWeights* l : {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down,
                             &L.shared_gate, &L.shared_up, &L.shared_down})
      if (l->w) mats.push_back(&l->w);
    for (MoeExpertWeights& e : L.experts)
      for (Tensor* t : {&e.gate_up, &e.gate, &e.up, &e.down})
        if (*t) mats.push_back(t);
  }
  for (const Tensor* t : mats)
    if (const QuantizedMatrix* m = quantized(*t))
      raise<InvalidArgument>(
          "--quantization {}: the checkpoint is quantized already ({}); it applies to 16-bit "
          "checkpoints",
          load_quantization_name(q), m->str());
  // One matrix per task: a model has hundreds, so the threads stay busy.
  pool.run(static_cast<int64_t>(mats.size()), [&](int64_t i) {
    Tensor& t = *mats[static_cast<size_t>(i)];
    t = quantized_view(quantize_one(t, q));
  });
}

}  // namespace tachyon
