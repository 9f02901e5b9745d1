#include "core/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace tachyon {
namespace {

Tensor random_matrix(int64_t n, int64_t k, uint32_t seed) {
  Tensor w = Tensor::empty({n, k}, DType::kF32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 0.5f);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = d(rng);
  return w;
}

// The largest |dequantize(quantize(w)) - w| relative to the row's largest |w|.
double worst_relative_error(const Tensor& w, const QuantizedMatrix& m) {
  const Tensor d = dequantize(m);
  double worst = 0;
  for (int64_t i = 0; i < w.dim(0); ++i) {
    double amax = 0, err = 0;
    for (int64_t j = 0; j < w.dim(1); ++j) {
      const double x = w.data<float>()[i * w.dim(1) + j];
      amax = std::max(amax, std::fabs(x));
      err = std::max(err, std::fabs(x - d.data<float>()[i * w.dim(1) + j]));
    }
    worst = std::max(worst, err / amax);
  }
  return worst;
}

TEST(Quant, IntRoundTripWithinHalfAStep) {
  const Tensor w = random_matrix(6, 64, 1);
  for (int bits : {4, 8})
    for (int64_t group : {16, 64})
      for (bool sym : {true, false}) {
        auto m = quantize_int(w, bits, group, sym);
        m->validate();
        // Half a quantization step of the widest range a group can have (4-bit
        // symmetric: of a range clipped by up to 30%, whose largest values lose the rest).
        const double step = (sym ? 1.0 / ((1 << (bits - 1)) - 1) : 2.0 / ((1 << bits) - 1));
        const double bound = sym && bits == 4 ? 0.3 + 0.5 * step : 0.5 * step;
        EXPECT_LE(worst_relative_error(w, *m), bound + 1e-6)
            << "bits " << bits << " group " << group << " sym " << sym;
        EXPECT_GT(worst_relative_error(w, *m), 0.0);
      }
}

// The 4-bit symmetric scale is the one of least squared error among clipped ranges: never
// worse than max|w| / 7, and better on a group with one outlier.
TEST(Quant, Int4ScaleClipsWhereThatLowersTheError) {
  Tensor w = random_matrix(2, 32, 9);
  w.data<float>()[5] = 4.f;  // row 0: an outlier
  auto m = quantize_int(w, 4, 32, true);
  const Tensor d = dequantize(*m);
  for (int64_t i = 0; i < 2; ++i) {
    double amax = 0, err = 0, err_full = 0;
    for (int64_t j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(double{w.data<float>()[i * 32 + j]}));
    const double full = amax / 7;
    for (int64_t j = 0; j < 32; ++j) {
      const double x = w.data<float>()[i * 32 + j];
      err += std::pow(x - d.data<float>()[i * 32 + j], 2);
      err_full += std::pow(x - std::clamp(std::round(x / full), -8.0, 7.0) * full, 2);
    }
    EXPECT_LE(err, err_full * (1 + 1e-5)) << i;
    if (i == 0) EXPECT_LT(m->scales.data<float>()[0], static_cast<float>(full));
  }
  Tensor bad = random_matrix(2, 32, 9);
  bad.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_int(bad, 8, 32, true), InvalidArgument);
  EXPECT_THROW(quantize_fp8(bad, 1, 32), InvalidArgument);
}

TEST(Quant, Fp8RoundTripWithinE4m3Precision) {
  const Tensor w = random_matrix(8, 48, 2);
  for (auto [bn, bk] : {std::pair<int64_t, int64_t>{1, 48}, {8, 48}, {4, 16}}) {
    auto m = quantize_fp8(w, bn, bk);
    m->validate();
    // e4m3 keeps 3 mantissa bits: relative error 2^-4 of a value, and values far below
    // the block's largest lose more; 1/16 of the row's largest bounds both here.
    EXPECT_LE(worst_relative_error(w, *m), 1.0 / 16);
  }
}

TEST(Quant, ViewFindsItsMatrix) {
  auto m = quantize_int(random_matrix(4, 32, 3), 4, 32, true);
  const Tensor v = quantized_view(m);
  EXPECT_EQ(v.shape(), Shape({4, 32}));
  EXPECT_EQ(v.dtype(), DType::kU8);
  EXPECT_EQ(quantized(v), m.get());
  EXPECT_EQ(quantized(random_matrix(4, 32, 3)), nullptr);
  EXPECT_EQ(quantized(Tensor()), nullptr);
}

TEST(Quant, PermutationMovesColumns) {
  const Tensor w = random_matrix(3, 16, 4);
  auto m = quantize_int(w, 8, 16, false);
  const Tensor plain = dequantize(*m);
  std::vector<int32_t> p(16);
  std::iota(p.begin(), p.end(), 0);
  std::reverse(p.begin(), p.end());
  m->perm = Tensor::empty({16}, DType::kI32);
  std::copy(p.begin(), p.end(), m->perm.data<int32_t>());
  m->validate();
  const Tensor moved = dequantize(*m);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 16; ++j)
      EXPECT_EQ(moved.data<float>()[i * 16 + p[static_cast<size_t>(j)]],
                plain.data<float>()[i * 16 + j]);
  m->perm.data<int32_t>()[0] = m->perm.data<int32_t>()[1];
  EXPECT_THROW(m->validate(), InvalidArgument);
}

TEST(Quant, ValidateNamesWhatDisagrees) {
  auto m = quantize_int(random_matrix(4, 32, 5), 4, 16, false);
  m->scales = Tensor::empty({4, 3}, DType::kF32);
  EXPECT_THROW(m->validate(), InvalidArgument);
  m = quantize_int(random_matrix(4, 32, 5), 4, 16, true);
  m->zeros.data<uint8_t>()[0] = 16;
  EXPECT_THROW(m->validate(), InvalidArgument);
  m = quantize_int(random_matrix(4, 32, 5), 4, 16, false);
  m->bits = 3;
  EXPECT_THROW(m->validate(), InvalidArgument);
  EXPECT_THROW(quantize_int(random_matrix(4, 30, 5), 4, 16, true), InvalidArgument);
  EXPECT_THROW(quantize_int(random_matrix(4, 32, 5), 3, 16, true), InvalidArgument);
}

TEST(Quant, StackedRowsDequantizeToStackedMatrices) {
  const Tensor a = random_matrix(4, 32, 6), b = random_matrix(2, 32, 7);
  for (int scheme = 0; scheme < 3; ++scheme) {
    std::shared_ptr<QuantizedMatrix> qa, qb;
    if (scheme == 0) {
      qa = quantize_int(a, 4, 16, false);
      qb = quantize_int(b, 4, 16, true);
    } else if (scheme == 1) {
      qa = quantize_fp8(a, 1, 32);
      qb = quantize_fp8(b, 2, 32);  // per tensor
    } else {
      qa = quantize_fp8(a, 2, 16);
      qb = quantize_fp8(b, 2, 16);
    }
    const QuantizedMatrix* parts[] = {qa.get(), qb.get()};
    auto s = stack_quantized_rows(parts);
    ASSERT_NE(s, nullptr) << scheme;
    s->validate();
    const Tensor d = dequantize(*s), da = dequantize(*qa), db = dequantize(*qb);
    for (int64_t i = 0; i < 4 * 32; ++i) EXPECT_EQ(d.data<float>()[i], da.data<float>()[i]);
    for (int64_t i = 0; i < 2 * 32; ++i)
      EXPECT_EQ(d.data<float>()[4 * 32 + i], db.data<float>()[i]);
  }
  auto qa = quantize_int(a, 4, 16, false), qb = quantize_int(b, 8, 16, false);
  const QuantizedMatrix* mixed[] = {qa.get(), qb.get()};
  EXPECT_EQ(stack_quantized_rows(mixed), nullptr);
}

}  // namespace
}  // namespace tachyon
