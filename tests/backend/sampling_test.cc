// The CPU backend's sampling helpers (argmax, log_softmax) against float64 references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/ops.h"

namespace tachyon {
namespace {

TEST(CpuSampling, ArgmaxAndLogSoftmax) {
  auto be = make_cpu_backend();
  const int64_t rows = 4, vocab = 1003;
  Tensor logits = Tensor::empty({rows, vocab}, DType::kF32);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = d(rng);
  logits.data<float>()[1 * vocab + 17] = 30.f;  // tie: the lower index wins
  logits.data<float>()[1 * vocab + 900] = 30.f;
  Tensor ids = Tensor::empty({rows}, DType::kI32);
  be->argmax(logits, ids);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = logits.data<float>() + r * vocab;
    EXPECT_EQ(ids.data<int32_t>()[r], std::max_element(p, p + vocab) - p);
  }
  EXPECT_EQ(ids.data<int32_t>()[1], 17);

  Tensor lp = logits.clone();
  be->log_softmax(lp);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = logits.data<float>() + r * vocab;
    double mx = *std::max_element(p, p + vocab), s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(p[j] - mx);
    for (int64_t j = 0; j < vocab; ++j)
      ASSERT_NEAR(lp.data<float>()[r * vocab + j], p[j] - mx - std::log(s), 1e-4) << r << " " << j;
  }

  logits.data<float>()[2 * vocab + 5] = NAN;
  be->argmax(logits, ids);
  EXPECT_EQ(ids.data<int32_t>()[2], -1);
}

}  // namespace
}  // namespace tachyon
