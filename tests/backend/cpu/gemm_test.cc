#include "backend/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Weights in a given dtype plus the exact f32 values they hold (the reference reads
// those, so the comparison measures the kernel's arithmetic, not the dtype rounding).
struct Weights {
  DType dtype;
  int64_t n, k;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [n, k]

  const void* data() const { return bytes.data(); }
};

Weights make_weights(DType dtype, int64_t n, int64_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Weights w{dtype, n, k, {}, {}};
  const size_t count = static_cast<size_t>(n * k);
  // One spare element of NaN after the matrix: a kernel reading past it shows up.
  w.bytes.resize((count + 1) * dtype_size(dtype));
  w.values.resize(count);
  for (size_t i = 0; i <= count; ++i) {
    const float v = i < count ? dist(rng) : kNaN;
    switch (dtype) {
      case DType::kF32:
        reinterpret_cast<float*>(w.bytes.data())[i] = v;
        break;
      case DType::kF16:
        reinterpret_cast<f16*>(w.bytes.data())[i] = f32_to_f16(v);
        break;
      case DType::kBF16:
        reinterpret_cast<bf16*>(w.bytes.data())[i] = f32_to_bf16(v);
        break;
      default:
        ADD_FAILURE() << "dtype";
    }
    if (i < count) w.values[i] = load_as_f32(w.bytes.data(), dtype, i);
  }
  return w;
}

// x [m, k] with row stride ldx; the padding columns hold NaN so that reading them
// poisons the result.
std::vector<float> make_x(int64_t m, int64_t k, int64_t ldx, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(std::max<int64_t>(1, m * ldx)), kNaN);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) x[i * ldx + p] = dist(rng);
  }
  return x;
}

std::vector<float> make_bias(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> b(static_cast<size_t>(n));
  for (auto& v : b) v = dist(rng);
  return b;
}

// float64 reference.
std::vector<double> reference(const std::vector<float>& x, int64_t m, int64_t k, int64_t ldx,
                              const Weights& w, const float* bias) {
  std::vector<double> y(static_cast<size_t>(m * w.n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < w.n; ++j) {
      double s = bias != nullptr ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        s += static_cast<double>(x[i * ldx + p]) * static_cast<double>(w.values[j * k + p]);
      }
      y[i * w.n + j] = s;
    }
  }
  return y;
}

// ‖y − ref‖ / ‖ref‖ over the valid part; checks that the padding of y is untouched.
double normalized_error(const std::vector<float>& y, int64_t m, int64_t n, int64_t ldy,
                        const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const float v = y[i * ldy + j];
      if (j >= n) {
        EXPECT_EQ(v, -7.f) << "y padding written at " << i << "," << j;
        continue;
      }
      if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
      const double d = v - ref[i * n + j];
      num += d * d;
      den += ref[i * n + j] * ref[i * n + j];
    }
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The packed copy of w, followed by NaN: a kernel reading past the packed panels shows up.
std::vector<uint8_t> pack(const Weights& w, ThreadPool& pool) {
  const size_t elems = static_cast<size_t>(packed_weight_elems(w.dtype, w.n, w.k));
  const size_t esize = dtype_size(w.dtype);
  std::vector<uint8_t> out((elems + 64) * esize, 0xff);  // 0xffff.. is NaN in every dtype
  pack_weight(w.data(), w.dtype, w.n, w.k, out.data(), &pool);
  return out;
}

// f32 accumulation over k <= a few thousand of values in [-1, 1]: ~1e-7 typically.
constexpr double kTolerance = 2e-6;

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

class GemmIsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << cpu_isa_name(GetParam());
  }

  // Runs one case and returns the normalised error: with the weights as stored, or
  // packed (pack_weight) when `packed`.
  double run_case(DType dtype, int64_t m, int64_t k, int64_t n, bool with_bias, int64_t ldx_pad,
                  int64_t ldy_pad, ThreadPool& pool, uint32_t seed, bool packed = false) {
    std::mt19937 rng(seed);
    const int64_t ldx = k + ldx_pad, ldy = n + ldy_pad;
    Weights w = make_weights(dtype, n, k, rng);
    std::vector<float> x = make_x(m, k, ldx, rng);
    std::vector<float> bias = make_bias(n, rng);
    const float* b = with_bias ? bias.data() : nullptr;
    std::vector<float> y(static_cast<size_t>(std::max<int64_t>(1, m * ldy)), -7.f);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = kNaN;  // must be overwritten
    }
    if (packed) {
      const std::vector<uint8_t> pw = pack(w, pool);
      const GemmWeight e{pw.data(), dtype, n, b, y.data(), ldy, true};
      gemm_xwt_multi_isa(GetParam(), x.data(), m, k, ldx, {&e, 1}, &pool);
    } else {
      gemm_xwt_isa(GetParam(), x.data(), m, k, ldx, w.data(), dtype, n, b, y.data(), ldy, &pool);
    }
    return normalized_error(y, m, n, ldy, reference(x, m, k, ldx, w, b));
  }
};

TEST_P(GemmIsaTest, OddShapesEveryDtype) {
  ThreadPool pool(2);
  // (m, k, n): decode sizes, tails of every vector width and block, block boundaries.
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {1, 1, 1},      {1, 7, 5},     {1, 16, 16},   {1, 33, 31},   {1, 300, 37},  {1, 1031, 70},
      {2, 15, 9},     {2, 64, 130},  {3, 17, 3},    {3, 257, 65},  {4, 100, 33},  {5, 31, 17},
      {7, 513, 47},   {7, 8, 1},     {17, 9, 100},  {17, 255, 31}, {64, 1, 64},   {64, 96, 129},
      {64, 300, 257}, {513, 33, 33}, {513, 260, 5}, {12, 256, 32}, {13, 512, 96}, {6, 40, 48},
      {100, 17, 1},   {1100, 40, 50}};
  uint32_t seed = 1;
  for (bool packed : {false, true}) {
    for (DType dtype : kDtypes) {
      for (const auto& [m, k, n] : shapes) {
        for (bool with_bias : {false, true}) {
          const double err = run_case(dtype, m, k, n, with_bias, 0, 0, pool, seed++, packed);
          EXPECT_LT(err, kTolerance) << dtype_name(dtype) << " m=" << m << " k=" << k << " n=" << n
                                     << " bias=" << with_bias << " packed=" << packed;
        }
      }
    }
  }
}

TEST_P(GemmIsaTest, StridedInputAndOutput) {
  ThreadPool pool(2);
  uint32_t seed = 1000;
  for (bool packed : {false, true}) {
    for (DType dtype : kDtypes) {
      for (int64_t m : {1, 3, 18, 70}) {
        const double err = run_case(dtype, m, 45, 23, true, 5, 3, pool, seed++, packed);
        EXPECT_LT(err, kTolerance) << dtype_name(dtype) << " m=" << m << " packed=" << packed;
        const double err2 = run_case(dtype, m, 600, 50, false, 16, 32, pool, seed++, packed);
        EXPECT_LT(err2, kTolerance) << dtype_name(dtype) << " m=" << m << " packed=" << packed;
      }
    }
  }
}

TEST_P(GemmIsaTest, ThreadCountsAndLargerShapes) {
  uint32_t seed = 2000;
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (const auto& [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1024, 300},
                                    {2, 2816, 64},
                                    {40, 1024, 200},
                                    {150, 700, 64},
                                    // several k blocks on every path, partial last tiles
                                    {40, 2100, 70},
                                    {20, 1500, 33},
                                    {512, 128, 40}}) {
        for (bool packed : {false, true}) {
          const double err = run_case(dtype, m, k, n, threads % 2 == 1, 0, 0, pool, seed++, packed);
          EXPECT_LT(err, kTolerance) << dtype_name(dtype) << " threads=" << threads << " m=" << m
                                     << " k=" << k << " n=" << n << " packed=" << packed;
        }
      }
    }
  }
}

TEST_P(GemmIsaTest, RandomShapes) {
  ThreadPool pool(2);
  std::mt19937 rng(77);
  std::uniform_int_distribution<int64_t> small_m(1, 9), big_m(10, 140), dim(1, 400);
  for (int trial = 0; trial < 60; ++trial) {
    const DType dtype = kDtypes[trial % 3];
    const int64_t m = trial % 2 ? small_m(rng) : big_m(rng);
    const int64_t k = dim(rng), n = dim(rng);
    const bool packed = trial % 7 < 4;
    const double err = run_case(dtype, m, k, n, trial % 4 < 2, trial % 5, trial % 3, pool,
                                static_cast<uint32_t>(3000 + trial), packed);
    EXPECT_LT(err, kTolerance) << dtype_name(dtype) << " m=" << m << " k=" << k << " n=" << n
                               << " packed=" << packed;
  }
}

TEST_P(GemmIsaTest, MultiMatchesSeparateProducts) {
  ThreadPool pool(2);
  // Every entry stored, every entry packed, or a mix.
  for (int mode = 0; mode < 3; ++mode)
    for (int64_t m : {1, 2, 5, 33}) {
      std::mt19937 rng(static_cast<uint32_t>(4000 + m));
      const int64_t k = 200;
      std::vector<float> x = make_x(m, k, k, rng);
      // q/k/v-like: different widths and dtypes, one with bias, outputs in one buffer.
      const std::vector<Weights> ws = {make_weights(DType::kBF16, 64, k, rng),
                                       make_weights(DType::kF16, 37, k, rng),
                                       make_weights(DType::kF32, 5, k, rng)};
      std::vector<float> bias = make_bias(37, rng);
      const int64_t ldy = 64 + 37 + 5;
      std::vector<float> y(static_cast<size_t>(m * ldy), kNaN);
      std::vector<GemmWeight> entries;
      std::vector<std::vector<uint8_t>> packed(ws.size());
      int64_t col = 0;
      for (size_t e = 0; e < ws.size(); ++e) {
        const bool pack_it = mode == 1 || (mode == 2 && e != 1);
        if (pack_it) packed[e] = pack(ws[e], pool);
        entries.push_back({pack_it ? packed[e].data() : ws[e].data(), ws[e].dtype, ws[e].n,
                           e == 1 ? bias.data() : nullptr, y.data() + col, ldy, pack_it});
        col += ws[e].n;
      }
      gemm_xwt_multi_isa(GetParam(), x.data(), m, k, k, entries, &pool);
      col = 0;
      for (size_t e = 0; e < ws.size(); ++e) {
        std::vector<double> ref = reference(x, m, k, k, ws[e], entries[e].bias);
        std::vector<float> part(static_cast<size_t>(m * ws[e].n));
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ws[e].n; ++j) part[i * ws[e].n + j] = y[i * ldy + col + j];
        }
        EXPECT_LT(normalized_error(part, m, ws[e].n, ws[e].n, ref), kTolerance)
            << "m=" << m << " entry " << e << " mode " << mode;
        col += ws[e].n;
      }
    }
}

// f16 subnormals and extremes convert exactly on every path; inf and NaN propagate.
TEST_P(GemmIsaTest, F16SpecialValues) {
  ThreadPool pool(2);
  const int64_t k = 37;
  const uint16_t specials[] = {0x0001, 0x03ff, 0x8001, 0x0400, 0x7bff, 0xfbff,
                               0x3c00, 0x0000, 0x8000, 0x0200, 0x83ff, 0x3555};
  for (int64_t m : {1, 3, 20}) {
    // n = 40 rows of finite specials, then a row with +inf and a row with NaN.
    const int64_t n = 42;
    std::vector<uint16_t> w(static_cast<size_t>(n * k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = specials[(i * 7 + i / k) % std::size(specials)];
    w[40 * k + 5] = 0x7c00;  // +inf
    w[41 * k + 9] = 0x7e00;  // NaN
    std::vector<float> x(static_cast<size_t>(m * k));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f + static_cast<float>(i % 5) * 1e-3f;
    for (bool packed : {false, true}) {
      std::vector<float> y(static_cast<size_t>(m * n), -1.f);
      std::vector<uint16_t> pw(static_cast<size_t>(packed_weight_elems(DType::kF16, n, k)));
      pack_weight(w.data(), DType::kF16, n, k, pw.data(), &pool);
      const GemmWeight e{packed ? static_cast<const void*>(pw.data()) : w.data(),
                         DType::kF16,
                         n,
                         nullptr,
                         y.data(),
                         n,
                         packed};
      gemm_xwt_multi_isa(GetParam(), x.data(), m, k, k, {&e, 1}, &pool);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < 40; ++j) {
          // f32 summation error is relative to the size of the terms (rows mix +-65504).
          double ref = 0, size = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double t = static_cast<double>(x[i * k + p]) * f16_to_f32(f16{w[j * k + p]});
            ref += t;
            size += std::fabs(t);
          }
          EXPECT_NEAR(y[i * n + j], ref, 1e-5 * size) << "m=" << m << " " << i << "," << j;
        }
        EXPECT_EQ(y[i * n + 40], std::numeric_limits<float>::infinity()) << "m=" << m;
        EXPECT_TRUE(std::isnan(y[i * n + 41])) << "m=" << m;
      }
    }
  }
}

// A row's packed product is the same bits whatever rows it is computed with (one row
// alone or inside a batch, other threads' splits), on every dtype.
TEST_P(GemmIsaTest, PackedRowDoesNotDependOnTheBatch) {
  // m = 37: weights converted in registers; m = 150: panels unpacked once per task.
  for (const int64_t m : {37, 150})
    for (DType dtype : kDtypes) {
      std::mt19937 rng(6000 + static_cast<uint32_t>(dtype));
      const int64_t k = 700, n = 75, row = 20;
      Weights w = make_weights(dtype, n, k, rng);
      std::vector<float> x = make_x(m, k, k, rng);
      std::vector<float> bias = make_bias(n, rng);
      ThreadPool pool(2), one(1);
      const std::vector<uint8_t> pw = pack(w, pool);
      std::vector<float> batched(static_cast<size_t>(m * n)), alone(static_cast<size_t>(n));
      const GemmWeight eb{pw.data(), dtype, n, bias.data(), batched.data(), n, true};
      gemm_xwt_multi_isa(GetParam(), x.data(), m, k, k, {&eb, 1}, &pool);
      const GemmWeight ea{pw.data(), dtype, n, bias.data(), alone.data(), n, true};
      gemm_xwt_multi_isa(GetParam(), x.data() + row * k, 1, k, k, {&ea, 1}, &one);
      for (int64_t j = 0; j < n; ++j)
        EXPECT_EQ(alone[j], batched[row * n + j])
            << dtype_name(dtype) << " m=" << m << " column " << j;
    }
}

TEST_P(GemmIsaTest, EmptyDimensions) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  // k = 0: y is the bias (or zero).
  std::vector<float> bias = make_bias(6, rng);
  std::vector<float> y(3 * 6, kNaN);
  const uint16_t dummy = 0;
  gemm_xwt_isa(GetParam(), nullptr, 3, 0, 0, &dummy, DType::kBF16, 6, bias.data(), y.data(), 6,
               &pool);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_EQ(y[i * 6 + j], bias[j]);
  }
  gemm_xwt_isa(GetParam(), nullptr, 2, 0, 0, &dummy, DType::kF16, 6, nullptr, y.data(), 6, &pool);
  for (int j = 0; j < 12; ++j) EXPECT_EQ(y[j], 0.f);
  // m = 0 and n = 0: nothing is touched.
  gemm_xwt_isa(GetParam(), nullptr, 0, 8, 8, &dummy, DType::kF32, 6, nullptr, nullptr, 6, &pool);
  std::vector<float> x(8, 1.f);
  gemm_xwt_isa(GetParam(), x.data(), 1, 8, 8, nullptr, DType::kF32, 0, nullptr, nullptr, 0, &pool);
}

std::string isa_param_name(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(cpu_isa_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, GemmIsaTest,
                         ::testing::Values(CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         isa_param_name);

// The packed layout is the one gemm.h documents (other code may rely on it).
TEST(Gemm, PackedLayoutAsDocumented) {
  ThreadPool pool(2);
  const int64_t n = 40, k = 5;
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint16_t>(i + 1);  // never zero
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const int64_t kp = dtype == DType::kBF16 ? 6 : 5;
    ASSERT_EQ(packed_weight_elems(dtype, n, k), 2 * kPanel * kp);
    std::vector<uint16_t> out(static_cast<size_t>(2 * kPanel * kp), 0xabcd);
    pack_weight(w.data(), dtype, n, k, out.data(), &pool);
    for (int64_t j = 0; j < 2 * kPanel; ++j) {
      for (int64_t p = 0; p < kp; ++p) {
        const int64_t s = j / kPanel, r = j % kPanel;
        const int64_t at = dtype == DType::kBF16
                               ? s * kp * kPanel + ((p / 2) * kPanel + r) * 2 + p % 2
                               : s * kp * kPanel + p * kPanel + r;
        const uint16_t want = j < n && p < k ? w[j * k + p] : 0;
        EXPECT_EQ(out[at], want) << dtype_name(dtype) << " j=" << j << " p=" << p;
      }
    }
  }
}

TEST(Gemm, DefaultPathIsSupportedAndNamed) {
  const CpuIsa isa = active_cpu_isa();
  EXPECT_TRUE(cpu_isa_supported(isa));
  EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa);
  EXPECT_FALSE(parse_cpu_isa("sse9").has_value());
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::kPortable));
}

TEST(Gemm, DefaultEntryPointMatchesReference) {
  std::mt19937 rng(9);
  const int64_t m = 9, k = 130, n = 70;
  Weights w = make_weights(DType::kBF16, n, k, rng);
  std::vector<float> x = make_x(m, k, k, rng);
  std::vector<float> y(static_cast<size_t>(m * n), kNaN);
  gemm_xwt(x.data(), m, k, k, w.data(), w.dtype, n, nullptr, y.data(), n);
  EXPECT_LT(normalized_error(y, m, n, n, reference(x, m, k, k, w, nullptr)), kTolerance);
}

TEST(Gemm, RejectsBadArguments) {
  std::vector<float> x(16, 1.f), y(16);
  const uint8_t w[16] = {};
  EXPECT_THROW(gemm_xwt(x.data(), 1, 4, 4, w, DType::kI8, 2, nullptr, y.data(), 2), Error);
  EXPECT_THROW(gemm_xwt(x.data(), 1, 4, 3, w, DType::kF32, 2, nullptr, y.data(), 2), Error);
  EXPECT_THROW(gemm_xwt(x.data(), 1, 4, 4, w, DType::kF32, 2, nullptr, y.data(), 1), Error);
  EXPECT_THROW(gemm_xwt(x.data(), -1, 4, 4, w, DType::kF32, 2, nullptr, y.data(), 2), Error);
}

}  // namespace
}  // namespace tachyon::cpu
