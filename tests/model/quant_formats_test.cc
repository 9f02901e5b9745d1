// The quantized checkpoint readers: for each format a tensor set built here by the
// format's own packing rule, and the expected matrix computed from the unpacked values
// by the format's formula in scalar code, against dequantize() of what the reader built.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "model/quant_formats.h"

namespace tachyon {
namespace {

using Tensors = std::map<std::string, Tensor>;

TensorLookup lookup(const Tensors& t) {
  return [&t](const std::string& name) {
    auto it = t.find(name);
    return it == t.end() ? Tensor{} : it->second;
  };
}

Tensor i32(const std::vector<uint32_t>& v, Shape shape) {
  Tensor t = Tensor::empty(shape, DType::kI32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
  return t;
}

// Random positive scales rounded to f16, kept as f32 values too.
Tensor f16_scales(std::mt19937& rng, Shape shape, std::vector<float>& values) {
  std::uniform_real_distribution<float> d(0.01f, 0.05f);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  t = t.to(DType::kF16);
  values.resize(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = load_as_f32(t.raw(), t.dtype(), i);
  return t;
}

void expect_matrix(const QuantizedMatrix& m, const std::vector<float>& want) {
  const Tensor got = dequantize(m);
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_FLOAT_EQ(got.data<float>()[i], want[i]) << "element " << i << " of " << m.str();
}

// ---- GPTQ ----

struct GptqCase {
  int bits;
  int64_t group;  // -1: per channel
  bool sym, v1;
  int act_order;  // 0: none, 1: g_idx shuffled uniform groups, 2: irregular groups
};

class Gptq : public ::testing::TestWithParam<GptqCase> {};

TEST_P(Gptq, MatchesTheFormula) {
  const GptqCase c = GetParam();
  const int64_t n = 16, k = 256, pack = 32 / c.bits;
  const uint32_t top = 1u << c.bits;
  std::mt19937 rng(c.bits * 1000 + static_cast<int>(c.group) + c.act_order * 7);
  // Each input column's group.
  std::vector<int64_t> gidx(k);
  int64_t groups;
  if (c.act_order == 2) {
    const std::vector<int64_t> sizes = {96, 32, 64, 64};  // gcd 32
    groups = 4;
    int64_t j = 0;
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t r = 0; r < sizes[g]; ++r) gidx[j++] = g;
  } else {
    const int64_t gs = c.group > 0 ? c.group : k;
    groups = k / gs;
    for (int64_t j = 0; j < k; ++j) gidx[j] = j / gs;
  }
  if (c.act_order > 0) std::shuffle(gidx.begin(), gidx.end(), rng);
  std::uniform_int_distribution<uint32_t> qd(0, top - 1);
  std::vector<uint32_t> q(n * k), z(groups * n);  // q[j * n + i], z[g * n + i]
  for (auto& v : q) v = qd(rng);
  for (auto& v : z) v = c.sym ? top / 2 : qd(rng);
  std::vector<float> s;
  Tensors t;
  t["m.scales"] = f16_scales(rng, {groups, n}, s);
  std::vector<uint32_t> qw((k / pack) * n, 0), qz(groups * (n / pack), 0);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t i = 0; i < n; ++i) qw[(j / pack) * n + i] |= q[j * n + i] << (c.bits * (j % pack));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t stored = c.v1 ? (z[g * n + i] + top - 1) % top : z[g * n + i];
      qz[g * (n / pack) + i / pack] |= stored << (c.bits * (i % pack));
    }
  t["m.qweight"] = i32(qw, {k / pack, n});
  t["m.qzeros"] = i32(qz, {groups, n / pack});
  if (c.act_order > 0) {
    std::vector<uint32_t> g32(gidx.begin(), gidx.end());
    t["m.g_idx"] = i32(g32, {k});
  }
  QuantConfig cfg;
  cfg.method = QuantMethod::kGptq;
  cfg.bits = c.bits;
  cfg.group_size = c.group;
  cfg.gptq_v1 = c.v1;
  auto m = read_quantized(cfg, "m", n, k, lookup(t));
  std::vector<float> want(n * k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t g = gidx[j];
      want[i * k + j] =
          (static_cast<float>(q[j * n + i]) - static_cast<float>(z[g * n + i])) * s[g * n + i];
    }
  expect_matrix(*m, want);
  EXPECT_EQ(m->symmetric, c.sym);
  EXPECT_EQ(static_cast<bool>(m->perm), c.act_order > 0);
  EXPECT_EQ(m->group_size, c.act_order == 2 ? 32 : (c.group > 0 ? c.group : k));
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Gptq,
    ::testing::Values(GptqCase{4, 128, true, true, 0}, GptqCase{4, 128, false, true, 0},
                      GptqCase{4, 32, false, false, 0}, GptqCase{4, 64, true, false, 0},
                      GptqCase{4, -1, false, true, 0}, GptqCase{8, 128, true, true, 0},
                      GptqCase{8, 64, false, false, 0}, GptqCase{8, -1, true, false, 0},
                      GptqCase{4, 64, false, true, 1}, GptqCase{8, 32, true, false, 1},
                      GptqCase{4, 0, false, true, 2}, GptqCase{8, 0, true, false, 2}));

TEST(GptqChecks, RefusesBadTensors) {
  const int64_t n = 16, k = 128;
  QuantConfig cfg;
  cfg.method = QuantMethod::kGptq;
  cfg.bits = 4;
  cfg.group_size = 64;
  std::mt19937 rng(1);
  std::vector<float> s;
  auto good = [&]() {
    Tensors t;
    t["m.qweight"] = i32(std::vector<uint32_t>(k / 8 * n, 0x88888888u), {k / 8, n});
    t["m.qzeros"] = i32(std::vector<uint32_t>(2 * n / 8, 0x77777777u), {2, n / 8});
    t["m.scales"] = f16_scales(rng, {2, n}, s);
    return t;
  };
  auto fails = [&](Tensors t, const std::string& needle, int64_t kk = 128) {
    try {
      read_quantized(cfg, "m", n, kk, lookup(t));
      ADD_FAILURE() << "accepted, expected: " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(read_quantized(cfg, "m", n, k, lookup(good())));
  {
    Tensors t = good();
    t["m.qweight"] = i32(std::vector<uint32_t>(k / 8 * n * 2, 0), {k / 4, n});
    fails(t, "m.qweight");  // shape contradicting the model's k
  }
  {
    Tensors t = good();
    t.erase("m.scales");
    fails(t, "'m.scales' is missing");
  }
  {
    Tensors t = good();
    t.erase("m.qzeros");
    fails(t, "'m.qzeros' is missing");
  }
  {
    Tensors t = good();
    t["m.scales"] = i32(std::vector<uint32_t>(2 * n, 1), {2, n});
    fails(t, "dtype");
  }
  {
    Tensors t = good();
    std::vector<uint32_t> g(k, 0);
    g[5] = 2;  // only groups 0 and 1 have scales
    t["m.g_idx"] = i32(g, {k});
    fails(t, "m.g_idx");
  }
  {
    cfg.group_size = 64;  // does not divide 96
    Tensors t = good();
    t["m.qweight"] = i32(std::vector<uint32_t>(96 / 8 * n, 0), {96 / 8, n});
    fails(t, "group_size 64 does not divide 96", 96);
  }
  {
    Tensors t = good();
    t["m.scales"] = f16_scales(rng, {3, n}, s);  // 3 groups, group_size 64 implies 2
    fails(t, "'m.scales' has 3 groups");
  }
  {
    Tensors t = good();
    Tensor sc = Tensor::zeros({2, n}, DType::kF32);
    sc.data<float>()[3] = std::numeric_limits<float>::infinity();
    t["m.scales"] = sc;
    fails(t, "not finite");
  }
}

// ---- AWQ ----

struct AwqCase {
  int64_t group;
  bool gemv;
};

class Awq : public ::testing::TestWithParam<AwqCase> {};

TEST_P(Awq, MatchesTheFormula) {
  const AwqCase c = GetParam();
  const int64_t n = 16, k = 256;
  const int64_t gs = c.group > 0 ? c.group : k, groups = k / gs;
  std::mt19937 rng(static_cast<int>(gs) + c.gemv);
  std::uniform_int_distribution<uint32_t> qd(0, 15);
  std::vector<uint32_t> q(n * k), z(n * groups);  // q[i * k + j], z[i * groups + g]
  for (auto& v : q) v = qd(rng);
  for (auto& v : z) v = qd(rng);
  std::vector<float> s;  // s[i * groups + g]
  Tensors t;
  if (!c.gemv) {
    // gemm: [k, n / 8], word nibble p holds column order[p] of its eight.
    const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    std::vector<uint32_t> qw(k * n / 8, 0), qz(groups * n / 8, 0);
    for (int64_t col = 0; col < n / 8; ++col)
      for (int p = 0; p < 8; ++p) {
        const int64_t i = col * 8 + order[p];
        for (int64_t j = 0; j < k; ++j) qw[j * (n / 8) + col] |= q[i * k + j] << (4 * p);
        for (int64_t g = 0; g < groups; ++g) qz[g * (n / 8) + col] |= z[i * groups + g] << (4 * p);
      }
    t["m.qweight"] = i32(qw, {k, n / 8});
    t["m.qzeros"] = i32(qz, {groups, n / 8});
    std::vector<float> sg;  // [groups, n]
    t["m.scales"] = f16_scales(rng, {groups, n}, sg);
    s.resize(n * groups);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t g = 0; g < groups; ++g) s[i * groups + g] = sg[g * n + i];
  } else {
    // gemv: [n, k / 8] plain; zeros [n, zw] along the groups; scales [n, zw * 8].
    const int64_t mult = gs >= 128 ? 1 : gs == 64 ? 2 : 4;
    const int64_t zw = ((groups + 7) / 8 + mult - 1) / mult * mult;
    std::vector<uint32_t> qw(n * k / 8, 0), qz(n * zw, 0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < k; ++j) qw[i * (k / 8) + j / 8] |= q[i * k + j] << (4 * (j % 8));
      for (int64_t g = 0; g < groups; ++g) qz[i * zw + g / 8] |= z[i * groups + g] << (4 * (g % 8));
    }
    t["m.qweight"] = i32(qw, {n, k / 8});
    t["m.qzeros"] = i32(qz, {n, zw});
    std::vector<float> sp;
    t["m.scales"] = f16_scales(rng, {n, zw * 8}, sp);
    s.resize(n * groups);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t g = 0; g < groups; ++g) s[i * groups + g] = sp[i * zw * 8 + g];
  }
  QuantConfig cfg;
  cfg.method = QuantMethod::kAwq;
  cfg.bits = 4;
  cfg.group_size = c.group;
  cfg.awq_gemv = c.gemv;
  auto m = read_quantized(cfg, "m", n, k, lookup(t));
  std::vector<float> want(n * k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      want[i * k + j] =
          (static_cast<float>(q[i * k + j]) - static_cast<float>(z[i * groups + j / gs])) *
          s[i * groups + j / gs];
  expect_matrix(*m, want);
}

INSTANTIATE_TEST_SUITE_P(Formats, Awq,
                         ::testing::Values(AwqCase{128, false}, AwqCase{64, false},
                                           AwqCase{-1, false}, AwqCase{32, true}, AwqCase{64, true},
                                           AwqCase{128, true}));

// ---- FP8 ----

Tensor fp8_values(std::mt19937& rng, int64_t n, int64_t k, std::vector<float>& values) {
  std::uniform_real_distribution<float> d(-400.f, 400.f);
  Tensor t = Tensor::empty({n, k}, DType::kF8E4M3);
  values.resize(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    t.data<uint8_t>()[i] = f32_to_e4m3(d(rng));
    values[i] = e4m3_to_f32(t.data<uint8_t>()[i]);
  }
  return t;
}

Tensor f32_tensor(std::mt19937& rng, Shape shape, std::vector<float>& values) {
  std::uniform_real_distribution<float> d(1e-4f, 1e-2f);
  Tensor t = Tensor::empty(shape, DType::kF32);
  values.resize(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) values[i] = t.data<float>()[i] = d(rng);
  return t;
}

TEST(Fp8, BlockChannelAndTensorScales) {
  const int64_t n = 200, k = 300;  // partial blocks at both edges
  std::mt19937 rng(3);
  std::vector<float> v, s;
  QuantConfig cfg;
  cfg.method = QuantMethod::kFp8;
  cfg.block_n = cfg.block_k = 128;
  Tensors t;
  t["m.weight"] = fp8_values(rng, n, k, v);
  t["m.weight_scale_inv"] = f32_tensor(rng, {2, 3}, s);
  std::vector<float> want(n * k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) want[i * k + j] = v[i * k + j] * s[(i / 128) * 3 + j / 128];
  expect_matrix(*read_quantized(cfg, "m", n, k, lookup(t)), want);

  cfg.block_n = cfg.block_k = 0;  // per tensor
  t.erase("m.weight_scale_inv");
  t["m.weight_scale"] = f32_tensor(rng, {}, s);
  for (int64_t i = 0; i < n * k; ++i) want[i] = v[i] * s[0];
  expect_matrix(*read_quantized(cfg, "m", n, k, lookup(t)), want);

  t["m.weight_scale"] = f32_tensor(rng, {n}, s);  // per channel
  for (int64_t i = 0; i < n * k; ++i) want[i] = v[i] * s[i / k];
  expect_matrix(*read_quantized(cfg, "m", n, k, lookup(t)), want);

  t["m.weight_scale"] = f32_tensor(rng, {3}, s);
  EXPECT_THROW(read_quantized(cfg, "m", n, k, lookup(t)), InvalidArgument);
  t["m.weight"] = Tensor::zeros({n, k}, DType::kBF16);
  EXPECT_THROW(read_quantized(cfg, "m", n, k, lookup(t)), InvalidArgument);
}

// ---- compressed-tensors ----

QuantConfig ct_config(CtFormat format, CtScheme s) {
  QuantConfig cfg;
  cfg.method = QuantMethod::kCompressedTensors;
  cfg.ct_format = format;
  s.targets = {"Linear"};
  cfg.ct_schemes = {s};
  return cfg;
}

TEST(CompressedTensors, Fp8ChannelTensorBlock) {
  const int64_t n = 64, k = 96;
  std::mt19937 rng(4);
  std::vector<float> v, s, want(n * k);
  CtScheme sc;
  sc.is_float = true;
  Tensors t;
  t["m.weight"] = fp8_values(rng, n, k, v);

  sc.strategy = CtStrategy::kChannel;
  t["m.weight_scale"] = f32_tensor(rng, {n, 1}, s);
  for (int64_t i = 0; i < n * k; ++i) want[i] = v[i] * s[i / k];
  expect_matrix(*read_quantized(ct_config(CtFormat::kFloatQuantized, sc), "m", n, k, lookup(t)),
                want);

  sc.strategy = CtStrategy::kTensor;
  t["m.weight_scale"] = f32_tensor(rng, {1}, s);
  for (int64_t i = 0; i < n * k; ++i) want[i] = v[i] * s[0];
  expect_matrix(*read_quantized(ct_config(CtFormat::kFloatQuantized, sc), "m", n, k, lookup(t)),
                want);

  sc.strategy = CtStrategy::kBlock;
  sc.block_n = sc.block_k = 32;
  t["m.weight_scale"] = f32_tensor(rng, {2, 3}, s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) want[i * k + j] = v[i * k + j] * s[(i / 32) * 3 + j / 32];
  expect_matrix(*read_quantized(ct_config(CtFormat::kFloatQuantized, sc), "m", n, k, lookup(t)),
                want);
}

struct CtIntCase {
  int bits;
  int64_t group;  // 0: channel
  bool zero_point, packed_zero;
  bool naive;
};

class CtInt : public ::testing::TestWithParam<CtIntCase> {};

TEST_P(CtInt, MatchesTheFormula) {
  const CtIntCase c = GetParam();
  const int64_t n = 16, k = 128, pack = 32 / c.bits, off = int64_t{1} << (c.bits - 1);
  const int64_t gs = c.group > 0 ? c.group : k, groups = k / gs;
  std::mt19937 rng(c.bits + static_cast<int>(c.group) + c.zero_point * 3 + c.naive * 5);
  std::uniform_int_distribution<int32_t> qd(static_cast<int32_t>(-off),
                                            static_cast<int32_t>(off - 1));
  std::vector<int32_t> q(n * k), zp(n * groups, 0);  // signed
  for (auto& x : q) x = qd(rng);
  if (c.zero_point)
    for (auto& x : zp) x = qd(rng);
  std::vector<float> s;
  Tensors t;
  t["m.weight_scale"] = f16_scales(rng, {n, groups}, s);
  if (c.naive) {
    Tensor w = Tensor::empty({n, k}, DType::kI8);
    for (int64_t i = 0; i < n * k; ++i) w.data<int8_t>()[i] = static_cast<int8_t>(q[i]);
    t["m.weight"] = w;
  } else {
    std::vector<uint32_t> pw(n * k / pack, 0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        pw[i * (k / pack) + j / pack] |= static_cast<uint32_t>(q[i * k + j] + off)
                                         << (c.bits * (j % pack));
    t["m.weight_packed"] = i32(pw, {n, k / pack});
    t["m.weight_shape"] = i32({static_cast<uint32_t>(n), static_cast<uint32_t>(k)}, {2});
  }
  if (c.zero_point) {
    if (c.packed_zero) {
      std::vector<uint32_t> pz(n / pack * groups, 0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < groups; ++g)
          pz[(i / pack) * groups + g] |= static_cast<uint32_t>(zp[i * groups + g] + off)
                                         << (c.bits * (i % pack));
      t["m.weight_zero_point"] = i32(pz, {n / pack, groups});
    } else {
      Tensor z = Tensor::empty({n, groups}, DType::kI8);
      for (int64_t i = 0; i < n * groups; ++i) z.data<int8_t>()[i] = static_cast<int8_t>(zp[i]);
      t["m.weight_zero_point"] = z;
    }
  }
  CtScheme sc;
  sc.bits = c.bits;
  sc.strategy = c.group > 0 ? CtStrategy::kGroup : CtStrategy::kChannel;
  sc.group_size = c.group;
  sc.symmetric = !c.zero_point;
  auto cfg = ct_config(c.naive ? CtFormat::kNaiveQuantized : CtFormat::kPackQuantized, sc);
  auto m = read_quantized(cfg, "m", n, k, lookup(t));
  std::vector<float> want(n * k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      want[i * k + j] =
          static_cast<float>(q[i * k + j] - zp[i * groups + j / gs]) * s[i * groups + j / gs];
  expect_matrix(*m, want);
  EXPECT_EQ(m->symmetric, !c.zero_point);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, CtInt,
    ::testing::Values(CtIntCase{4, 32, false, false, false}, CtIntCase{4, 128, true, false, false},
                      CtIntCase{4, 64, true, true, false}, CtIntCase{8, 0, false, false, false},
                      CtIntCase{8, 0, false, false, true}, CtIntCase{8, 32, true, false, true}));

TEST(CompressedTensors, RefusesAContradictingWeightShape) {
  CtScheme sc;
  sc.bits = 4;
  sc.strategy = CtStrategy::kChannel;
  Tensors t;
  t["m.weight_packed"] = i32(std::vector<uint32_t>(8 * 4, 0), {8, 4});
  t["m.weight_shape"] = i32({8, 40}, {2});
  Tensor sc16 = Tensor::zeros({8, 1}, DType::kF16);
  t["m.weight_scale"] = sc16;
  EXPECT_THROW(read_quantized(ct_config(CtFormat::kPackQuantized, sc), "m", 8, 32, lookup(t)),
               InvalidArgument);
  t["m.weight_shape"] = i32({8, 32}, {2});
  EXPECT_NO_THROW(read_quantized(ct_config(CtFormat::kPackQuantized, sc), "m", 8, 32, lookup(t)));
}

}  // namespace
}  // namespace tachyon
