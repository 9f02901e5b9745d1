#include "engine/row_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace tachyon {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(RowMath, FastExpIsAccurate) {
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(fast_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-kInf), 0.0f);
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);
  EXPECT_NEAR(fast_exp(10.0f), std::exp(10.0), std::exp(10.0) * 2e-7);
}

TEST(RowMath, MaxFindAndBadValuesAtEveryPosition) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (int n : {1, 3, 15, 16, 17, 31, 100, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    bool bad = true;
    const float m = row_max(x.data(), n, &bad);
    EXPECT_FALSE(bad);
    const size_t want = static_cast<size_t>(std::max_element(x.begin(), x.end()) - x.begin());
    EXPECT_EQ(m, x[want]);
    EXPECT_EQ(row_find(x.data(), n, m), static_cast<int32_t>(want));
    EXPECT_EQ(row_find(x.data(), n, 1e9f), -1);
    for (int pos = 0; pos < n; pos += std::max(1, n / 7)) {
      for (float poison : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
        auto y = x;
        y[static_cast<size_t>(pos)] = poison;
        row_max(y.data(), n, &bad);
        EXPECT_TRUE(bad) << "n " << n << " pos " << pos;
      }
      auto y = x;
      y[static_cast<size_t>(pos)] = -kInf;  // allowed: a banned token
      row_max(y.data(), n, &bad);
      EXPECT_FALSE(bad);
    }
  }
  std::vector<float> ties = {1, 5, 2, 5, 5};
  bool bad;
  EXPECT_EQ(row_find(ties.data(), 5, row_max(ties.data(), 5, &bad)), 1);
  std::vector<float> none = {-kInf, -kInf};
  EXPECT_EQ(row_max(none.data(), 2, &bad), -kInf);
}

TEST(RowMath, ExpSums) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int n : {2, 5, 1023, 1024, 1025, 5000}) {
    std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    x[0] = -kInf;
    bool bad;
    const float m = row_max(x.data(), n, &bad);
    double want = 0;
    for (float v : x) want += std::exp((static_cast<double>(v) - m) * 0.7);
    const double got = row_exp(x.data(), n, m, 0.7f, w.data());
    EXPECT_NEAR(got, want, want * 1e-6) << n;
    EXPECT_EQ(w[0], 0.0f);
    for (int i = 1; i < n; ++i)
      EXPECT_EQ(w[static_cast<size_t>(i)], fast_exp((x[static_cast<size_t>(i)] - m) * 0.7f));
    double want1 = 0;
    for (float v : x) want1 += std::exp(static_cast<double>(v) - m);
    EXPECT_NEAR(row_exp_sum(x.data(), n, m), want1, want1 * 1e-6);
  }
}

TEST(RowMath, NextAbove) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int n : {1, 7, 32, 33, 100, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    for (float t : {-10.0f, 0.0f, 1.5f, 2.5f, 10.0f}) {
      for (int from = 0; from <= n; from += std::max(1, n / 5)) {
        int32_t want = -1;
        for (int i = from; i < n; ++i)
          if (x[static_cast<size_t>(i)] > t) {
            want = i;
            break;
          }
        EXPECT_EQ(row_next_above(x.data(), n, from, t), want) << n << " " << t << " " << from;
      }
    }
  }
}

}  // namespace
}  // namespace tachyon
