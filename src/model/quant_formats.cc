#include "model/quant_formats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace tachyon {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

// One module's tensors, fetched and checked by name.
class Parts {
 public:
  Parts(const std::string& module, const TensorLookup& get) : module_(module), get_(get) {}

  std::string name(const char* part) const { return module_ + "." + part; }

  Tensor optional(const char* part) const { return get_(name(part)); }

  // A present tensor of one of `dtypes` (is_float: f32/f16/bf16) and shape `shape`
  // (an empty shape: any).
  Tensor need(const char* part, std::initializer_list<DType> dtypes, const Shape& shape) const {
    Tensor t = get_(name(part));
    if (!t) raise<InvalidArgument>("quantized tensor '{}' is missing", name(part));
    check(t, part, dtypes, shape);
    return t;
  }

  void check(const Tensor& t, const char* part, std::initializer_list<DType> dtypes,
             const Shape& shape) const {
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) {
      std::string want;
      for (DType d : dtypes) want += (want.empty() ? "" : "/") + std::string(dtype_name(d));
      raise<InvalidArgument>("quantized tensor '{}' has dtype {}; expected {}", name(part),
                             dtype_name(t.dtype()), want);
    }
    if (!shape.empty() && t.shape() != shape)
      raise<InvalidArgument>("quantized tensor '{}' has shape {}; expected {} for [{}, {}]",
                             name(part), shape_str(t.shape()), shape_str(shape), n_, k_);
  }

  void set_dims(int64_t n, int64_t k) {
    n_ = n;
    k_ = k;
  }

  [[noreturn]] void fail(const std::string& what) const {
    raise<InvalidArgument>("quantized module '{}' [{}, {}]: {}", module_, n_, k_, what);
  }

 private:
  const std::string& module_;
  const TensorLookup& get_;
  int64_t n_ = 0, k_ = 0;
};

constexpr std::initializer_list<DType> kFloats = {DType::kF32, DType::kF16, DType::kBF16};

// f32 copies of a float tensor's values (scales: finite).
std::vector<float> floats(const Parts& p, const char* part, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = load_as_f32(t.raw(), t.dtype(), i);
    if (!std::isfinite(v[i]))
      raise<InvalidArgument>("quantized tensor '{}': scale {} at {} is not finite", p.name(part),
                             v[i], i);
  }
  return v;
}

// Field p (bits wide) of a 32-bit word.
inline uint32_t field(int32_t word, int32_t bits, int64_t p) {
  return (static_cast<uint32_t>(word) >> (bits * p)) & ((1u << bits) - 1);
}

// An integer matrix in canonical form built from accessors: value(i, j) for row i and
// (sorted) column j, and per group the scale and zero of row i.
template <class Value, class Scale, class Zero>
std::shared_ptr<QuantizedMatrix> build_int(int64_t n, int64_t k, int32_t bits, int64_t group_size,
                                           Value value, Scale scale, Zero zero) {
  auto m = make_int_matrix(n, k, bits, group_size);
  const int64_t g = m->groups();
  auto* q = m->q.data<uint8_t>();
  auto* s = m->scales.data<float>();
  auto* z = m->zeros.data<uint8_t>();
  const uint32_t top = 1u << bits;
  bool symmetric = true;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* row = q + i * m->row_bytes();
    for (int64_t j = 0; j < k; ++j) set_packed_int(row, bits, j, value(i, j));
    for (int64_t gi = 0; gi < g; ++gi) {
      s[i * g + gi] = scale(i, gi);
      const uint32_t zv = zero(i, gi);
      z[i * g + gi] = static_cast<uint8_t>(zv);
      symmetric = symmetric && zv == top / 2;
    }
  }
  m->symmetric = symmetric;
  return m;
}

// ---- GPTQ ----

std::shared_ptr<QuantizedMatrix> read_gptq(const QuantConfig& cfg, Parts& p, int64_t n, int64_t k) {
  const int32_t bits = cfg.bits;
  const int64_t pack = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  if (k % pack != 0 || n % pack != 0)
    p.fail(fmt::format("{}-bit GPTQ needs both dimensions divisible by {}", bits, pack));
  const Tensor qweight = p.need("qweight", {DType::kI32}, {k / pack, n});
  const Tensor scales = p.need("scales", kFloats, {});
  if (scales.ndim() != 2 || scales.dim(1) != n || scales.dim(0) <= 0)
    p.check(scales, "scales", kFloats, {scales.ndim() == 2 ? scales.dim(0) : 1, n});
  const int64_t groups = scales.dim(0);
  const Tensor g_idx = p.optional("g_idx");

  // Each input column's group.
  std::vector<int64_t> group_of(static_cast<size_t>(k));
  if (g_idx) {
    p.check(g_idx, "g_idx", {DType::kI32, DType::kI64}, {k});
    for (int64_t j = 0; j < k; ++j) {
      const int64_t gv =
          g_idx.dtype() == DType::kI32 ? g_idx.data<int32_t>()[j] : g_idx.data<int64_t>()[j];
      if (gv < 0 || gv >= groups)
        raise<InvalidArgument>("quantized tensor '{}': group {} of column {} is outside [0, {})",
                               p.name("g_idx"), gv, j, groups);
      group_of[static_cast<size_t>(j)] = gv;
    }
  } else {
    const int64_t gs = cfg.group_size > 0 ? cfg.group_size : k;
    if (k % gs != 0) p.fail(fmt::format("group_size {} does not divide {}", gs, k));
    if (groups != k / gs)
      raise<InvalidArgument>("quantized tensor '{}' has {} groups; group_size {} implies {}",
                             p.name("scales"), groups, gs, k / gs);
    for (int64_t j = 0; j < k; ++j) group_of[static_cast<size_t>(j)] = j / gs;
  }
  const Tensor qzeros = p.need("qzeros", {DType::kI32}, {groups, n / pack});
  // Columns sorted by group (stable): perm[c] is the input column at sorted position c.
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) {
    return group_of[static_cast<size_t>(a)] < group_of[static_cast<size_t>(b)];
  });
  bool identity = true;
  for (int64_t c = 0; c < k; ++c) identity = identity && perm[static_cast<size_t>(c)] == c;
  // Irregular groups become the largest size that divides every run of one group.
  int64_t gs = 0, run = 0;
  for (int64_t c = 0; c < k; ++c) {
    ++run;
    const bool end =
        c + 1 == k || group_of[static_cast<size_t>(perm[static_cast<size_t>(c)])] !=
                          group_of[static_cast<size_t>(perm[static_cast<size_t>(c + 1)])];
    if (end) {
      gs = std::gcd(gs, run);
      run = 0;
    }
  }
  const auto* qw = qweight.data<int32_t>();
  const auto* qz = qzeros.data<int32_t>();
  const std::vector<float> sc = floats(p, "scales", scales);
  const bool v1 = cfg.gptq_v1;
  auto src_group = [&](int64_t canon) {
    return group_of[static_cast<size_t>(perm[static_cast<size_t>(canon * gs)])];
  };
  auto m = build_int(
      n, k, bits, gs,
      [&](int64_t i, int64_t c) {
        const int64_t j = perm[static_cast<size_t>(c)];
        return field(qw[(j / pack) * n + i], bits, j % pack);
      },
      [&](int64_t i, int64_t gi) { return sc[static_cast<size_t>(src_group(gi) * n + i)]; },
      [&](int64_t i, int64_t gi) {
        const uint32_t z = field(qz[src_group(gi) * (n / pack) + i / pack], bits, i % pack);
        return v1 ? (z + 1) & mask : z;
      });
  if (!identity) {
    m->perm = Tensor::empty({k}, DType::kI32);
    std::memcpy(m->perm.raw(), perm.data(), perm.size() * sizeof(int32_t));
  }
  return m;
}

// ---- AWQ ----

std::shared_ptr<QuantizedMatrix> read_awq(const QuantConfig& cfg, Parts& p, int64_t n, int64_t k) {
  const int64_t gs = cfg.group_size > 0 ? cfg.group_size : k;
  if (k % gs != 0) p.fail(fmt::format("group_size {} does not divide {}", gs, k));
  const int64_t groups = k / gs;
  if (n % 8 != 0 || k % 8 != 0) p.fail("4-bit AWQ needs both dimensions divisible by 8");
  const Tensor qzeros_t = p.optional("qzeros");
  if (!cfg.zero_point && !qzeros_t) {
    // Symmetric without stored zeros: every zero is 8.
  } else if (!qzeros_t) {
    raise<InvalidArgument>("quantized tensor '{}' is missing", p.name("qzeros"));
  }
  if (!cfg.awq_gemv) {
    // Nibble p of a word holds column kOrder[p]; column c is in nibble kNibble[c].
    static constexpr int kNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    const Tensor qweight = p.need("qweight", {DType::kI32}, {k, n / 8});
    const Tensor scales = p.need("scales", kFloats, {groups, n});
    if (qzeros_t) p.check(qzeros_t, "qzeros", {DType::kI32}, {groups, n / 8});
    const auto* qw = qweight.data<int32_t>();
    const auto* qz = qzeros_t ? qzeros_t.data<int32_t>() : nullptr;
    const std::vector<float> sc = floats(p, "scales", scales);
    return build_int(
        n, k, 4, gs,
        [&](int64_t i, int64_t j) { return field(qw[j * (n / 8) + i / 8], 4, kNibble[i % 8]); },
        [&](int64_t i, int64_t g) { return sc[static_cast<size_t>(g * n + i)]; },
        [&](int64_t i, int64_t g) {
          return qz ? field(qz[g * (n / 8) + i / 8], 4, kNibble[i % 8]) : 8u;
        });
  }
  // gemv: the zeros' width padded for the kernel's split of the groups.
  const int64_t mult = gs >= 128 ? 1 : gs == 64 ? 2 : gs == 32 ? 4 : 1;
  const int64_t zw = ceil_div(ceil_div(groups, 8), mult) * mult;
  const Tensor qweight = p.need("qweight", {DType::kI32}, {n, k / 8});
  const Tensor scales = p.need("scales", kFloats, {n, zw * 8});
  if (qzeros_t) p.check(qzeros_t, "qzeros", {DType::kI32}, {n, zw});
  const auto* qw = qweight.data<int32_t>();
  const auto* qz = qzeros_t ? qzeros_t.data<int32_t>() : nullptr;
  const std::vector<float> sc = floats(p, "scales", scales);
  return build_int(
      n, k, 4, gs, [&](int64_t i, int64_t j) { return field(qw[i * (k / 8) + j / 8], 4, j % 8); },
      [&](int64_t i, int64_t g) { return sc[static_cast<size_t>(i * zw * 8 + g)]; },
      [&](int64_t i, int64_t g) { return qz ? field(qz[i * zw + g / 8], 4, g % 8) : 8u; });
}

// ---- FP8 ----

// An fp8 matrix with scales `s` of one of the shapes a block [bn, bk] allows.
std::shared_ptr<QuantizedMatrix> build_fp8(Parts& p, const char* scale_part, const Tensor& w,
                                           const Tensor& s, int64_t bn, int64_t bk) {
  auto m = std::make_shared<QuantizedMatrix>();
  m->scheme = QuantScheme::kFp8;
  m->n = w.dim(0);
  m->k = w.dim(1);
  m->bits = 8;
  m->block_n = std::min(bn, m->n);
  m->block_k = std::min(bk, m->k);
  const int64_t rows = ceil_div(m->n, m->block_n), cols = ceil_div(m->k, m->block_k);
  if (s.numel() != rows * cols)
    raise<InvalidArgument>("quantized tensor '{}' has shape {}; expected {} scales ([{}, {}])",
                           p.name(scale_part), shape_str(s.shape()), rows * cols, rows, cols);
  m->q = w;
  m->scales = Tensor::empty({rows, cols}, DType::kF32);
  const std::vector<float> v = floats(p, scale_part, s);
  std::memcpy(m->scales.raw(), v.data(), v.size() * sizeof(float));
  return m;
}

std::shared_ptr<QuantizedMatrix> read_fp8(const QuantConfig& cfg, Parts& p, int64_t n, int64_t k) {
  const Tensor w = p.need("weight", {DType::kF8E4M3}, {n, k});
  if (cfg.block_n > 0) {
    const Tensor s =
        p.need("weight_scale_inv", kFloats, {ceil_div(n, cfg.block_n), ceil_div(k, cfg.block_k)});
    return build_fp8(p, "weight_scale_inv", w, s, cfg.block_n, cfg.block_k);
  }
  const Tensor s = p.need("weight_scale", kFloats, {});
  if (s.numel() == n && n > 1 && s.ndim() >= 1 && s.dim(0) == n)
    return build_fp8(p, "weight_scale", w, s, 1, k);
  return build_fp8(p, "weight_scale", w, s, n, k);
}

// ---- compressed-tensors ----

std::shared_ptr<QuantizedMatrix> read_ct(const CtScheme& sc, CtFormat format, Parts& p, int64_t n,
                                         int64_t k) {
  if (sc.is_float) {
    const Tensor w = p.need("weight", {DType::kF8E4M3}, {n, k});
    switch (sc.strategy) {
      case CtStrategy::kTensor:
        return build_fp8(p, "weight_scale", w, p.need("weight_scale", kFloats, {}), n, k);
      case CtStrategy::kChannel:
        return build_fp8(p, "weight_scale", w, p.need("weight_scale", kFloats, {n, 1}), 1, k);
      case CtStrategy::kBlock:
        return build_fp8(
            p, "weight_scale", w,
            p.need("weight_scale", kFloats, {ceil_div(n, sc.block_n), ceil_div(k, sc.block_k)}),
            sc.block_n, sc.block_k);
      case CtStrategy::kGroup:
        break;
    }
    p.fail("float weights with strategy 'group'");
  }
  const int32_t bits = sc.bits;
  const int64_t offset = int64_t{1} << (bits - 1);
  const int64_t gs = sc.strategy == CtStrategy::kGroup ? sc.group_size : k;
  if (k % gs != 0) p.fail(fmt::format("group_size {} does not divide {}", gs, k));
  const int64_t groups = k / gs;
  // The scales: [n, groups]; one per tensor ([1] or []) repeats.
  const Tensor scales = p.need("weight_scale", kFloats, {});
  const bool one_scale = sc.strategy == CtStrategy::kTensor;
  if (one_scale ? scales.numel() != 1 : scales.shape() != Shape({n, groups}))
    p.check(scales, "weight_scale", kFloats, one_scale ? Shape{1} : Shape{n, groups});
  const std::vector<float> s = floats(p, "weight_scale", scales);
  // The zero points (signed), unpacked [n, groups] or packed along n.
  std::vector<int64_t> zp(static_cast<size_t>(n * groups), 0);
  if (const Tensor z = p.optional("weight_zero_point"); z) {
    const int64_t pack = 32 / bits;
    if (z.dtype() == DType::kI32 && z.shape() == Shape({ceil_div(n, pack), groups}) &&
        z.shape() != Shape({n, groups})) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < groups; ++g)
          zp[static_cast<size_t>(i * groups + g)] =
              static_cast<int64_t>(
                  field(z.data<int32_t>()[(i / pack) * groups + g], bits, i % pack)) -
              offset;
    } else if (one_scale ? z.numel() == 1 : z.shape() == Shape({n, groups})) {
      p.check(z, "weight_zero_point", {DType::kI8, DType::kI32}, z.shape());
      for (int64_t i = 0; i < n * groups; ++i)
        zp[static_cast<size_t>(i)] = z.dtype() == DType::kI8 ? z.data<int8_t>()[one_scale ? 0 : i]
                                                             : z.data<int32_t>()[one_scale ? 0 : i];
    } else {
      p.check(z, "weight_zero_point", {DType::kI8, DType::kI32}, {n, groups});
    }
    for (size_t i = 0; i < zp.size(); ++i)
      if (zp[i] < -offset || zp[i] >= offset)
        raise<InvalidArgument>("quantized tensor '{}': zero point {} at {} is outside [{}, {})",
                               p.name("weight_zero_point"), zp[i], i, -offset, offset);
  }
  auto scale = [&](int64_t i, int64_t g) {
    return s[one_scale ? 0 : static_cast<size_t>(i * groups + g)];
  };
  auto zero = [&](int64_t i, int64_t g) {
    return static_cast<uint32_t>(zp[static_cast<size_t>(i * groups + g)] + offset);
  };
  if (format == CtFormat::kPackQuantized) {
    const int64_t pack = 32 / bits;
    if (k % pack != 0) p.fail(fmt::format("{}-bit packing needs k divisible by {}", bits, pack));
    const Tensor packed = p.need("weight_packed", {DType::kI32}, {n, k / pack});
    if (const Tensor shape = p.optional("weight_shape"); shape) {
      p.check(shape, "weight_shape", {DType::kI32, DType::kI64}, {2});
      const int64_t sn =
          shape.dtype() == DType::kI32 ? shape.data<int32_t>()[0] : shape.data<int64_t>()[0];
      const int64_t sk =
          shape.dtype() == DType::kI32 ? shape.data<int32_t>()[1] : shape.data<int64_t>()[1];
      if (sn != n || sk != k)
        raise<InvalidArgument>("quantized tensor '{}' says [{}, {}]; the model implies [{}, {}]",
                               p.name("weight_shape"), sn, sk, n, k);
    }
    const auto* pw = packed.data<int32_t>();
    return build_int(
        n, k, bits, gs,
        [&](int64_t i, int64_t j) { return field(pw[i * (k / pack) + j / pack], bits, j % pack); },
        scale, zero);
  }
  const Tensor w = p.need("weight", {DType::kI8}, {n, k});
  const auto* wv = w.data<int8_t>();
  for (int64_t i = 0; i < n * k; ++i)
    if (wv[i] < -offset || wv[i] >= offset)
      raise<InvalidArgument>("quantized tensor '{}': value {} at {} is outside [{}, {})",
                             p.name("weight"), wv[i], i, -offset, offset);
  return build_int(
      n, k, bits, gs,
      [&](int64_t i, int64_t j) { return static_cast<uint32_t>(wv[i * k + j] + offset); }, scale,
      zero);
}

}  // namespace

bool has_quantized_tensors(const QuantConfig& q, const std::string& module,
                           const TensorLookup& get) {
  switch (q.method) {
    case QuantMethod::kNone:
      return false;
    case QuantMethod::kGptq:
    case QuantMethod::kAwq:
      return static_cast<bool>(get(module + ".qweight"));
    case QuantMethod::kFp8:
    case QuantMethod::kCompressedTensors: {
      if (get(module + ".weight_packed")) return true;
      const Tensor w = get(module + ".weight");
      return w && !is_float_dtype(w.dtype());
    }
  }
  return false;
}

std::shared_ptr<QuantizedMatrix> read_quantized(const QuantConfig& q, const std::string& module,
                                                int64_t n, int64_t k, const TensorLookup& get) {
  Parts p(module, get);
  p.set_dims(n, k);
  if (n <= 0 || k <= 0) p.fail("empty shape");
  std::shared_ptr<QuantizedMatrix> m;
  switch (q.method) {
    case QuantMethod::kNone:
      p.fail("the checkpoint declares no quantization");
    case QuantMethod::kGptq:
      m = read_gptq(q, p, n, k);
      break;
    case QuantMethod::kAwq:
      m = read_awq(q, p, n, k);
      break;
    case QuantMethod::kFp8:
      m = read_fp8(q, p, n, k);
      break;
    case QuantMethod::kCompressedTensors: {
      const CtScheme* sc = q.ct_scheme(module);
      if (sc == nullptr) p.fail("no config group of quantization_config targets it");
      m = read_ct(*sc, q.ct_format, p, n, k);
      break;
    }
  }
  try {
    m->validate();
  } catch (const InvalidArgument& e) {
    p.fail(e.what());
  }
  return m;
}

}  // namespace tachyon
