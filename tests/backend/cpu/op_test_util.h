// Helpers for the backend op tests: random tensors and float64 comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tachyon::testing_util {

// A tensor of normal(0, stddev) values (+ mean), stored in `dtype`.
inline Tensor random_tensor(const Shape& shape, std::mt19937& rng, float stddev = 1.f,
                            DType dtype = DType::kF32, float mean = 0.f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> dist(mean, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return dtype == DType::kF32 ? t : t.to(dtype);
}

// Values of any float tensor as doubles.
inline std::vector<double> as_f64(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[static_cast<size_t>(i)] = load_as_f32(t.raw(), t.dtype(), static_cast<size_t>(i));
  return v;
}

// Expects |got - want| <= atol + rtol * |want| everywhere; reports the worst element.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double atol,
                         double rtol = 0, const char* what = "") {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = load_as_f32(got.raw(), got.dtype(), static_cast<size_t>(i));
    double w = want[static_cast<size_t>(i)];
    double excess = std::abs(g - w) - (atol + rtol * std::abs(w));
    if (!(excess <= worst) || std::isnan(g)) {
      worst = std::isnan(g) ? 1e30 : excess;
      at = i;
    }
  }
  if (at >= 0) {
    ADD_FAILURE() << what << ": element " << at << " got "
                  << load_as_f32(got.raw(), got.dtype(), static_cast<size_t>(at)) << " want "
                  << want[static_cast<size_t>(at)] << " (atol " << atol << ", rtol " << rtol << ")";
  }
}

}  // namespace tachyon::testing_util
