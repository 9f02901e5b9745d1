// The CPU backend's own ops (cpu_backend.cc): the sampling helpers (argmax, log_softmax)
// against float64 references, and the KV-cache block copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/ops.h"
#include "core/error.h"
#include "op_test_util.h"

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

using testing_util::as_f64;
using testing_util::expect_close;
using testing_util::random_tensor;

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
  std::mt19937 rng_{99};
};

TEST_F(CpuBackendTest, CopyBlocks) {
  Tensor c = random_tensor({5, 2, 3, 4}, rng_);
  auto before = as_f64(c);
  be_->copy_blocks(c, {{1, 3}, {4, 0}});
  std::vector<double> want = before;
  const int blk = 24;
  std::copy_n(before.begin() + 1 * blk, blk, want.begin() + 3 * blk);
  std::copy_n(before.begin() + 4 * blk, blk, want.begin() + 0 * blk);
  expect_close(c, want, 0, 0, "copy_blocks");
  EXPECT_THROW(be_->copy_blocks(c, {{0, 5}}), InvalidArgument);
}

TEST_F(CpuBackendTest, CopyBlocksBetween) {
  Tensor c = random_tensor({5, 2, 3, 4}, rng_);
  const auto before = as_f64(c);
  Tensor swap = be_->alloc_swap({3, 2, 3, 4}, c.dtype());
  be_->copy_blocks_between(c, swap, {{1, 0}, {4, 2}});
  Tensor back = random_tensor({5, 2, 3, 4}, rng_);
  std::vector<double> want = as_f64(back);
  be_->copy_blocks_between(swap, back, {{2, 1}, {0, 3}});
  const int blk = 24;
  std::copy_n(before.begin() + 4 * blk, blk, want.begin() + 1 * blk);
  std::copy_n(before.begin() + 1 * blk, blk, want.begin() + 3 * blk);
  expect_close(back, want, 0, 0, "copy_blocks_between");
  EXPECT_THROW(be_->copy_blocks_between(c, swap, {{5, 0}}), InvalidArgument);
  EXPECT_THROW(be_->copy_blocks_between(c, swap, {{0, 3}}), InvalidArgument);
  Tensor other = be_->alloc_swap({3, 2, 3, 5}, c.dtype());
  EXPECT_THROW(be_->copy_blocks_between(c, other, {{0, 0}}), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
