// The CUDA backend's paths past what the op harness compares with the CPU: which
// product linear_residual runs, the matrix-vector kernel, the fused rotary and cache
// write against the separate passes, weight conversion, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_ops_fixture.h"
#include "backend/cuda/kernels.h"
#include "backend/ops.h"

namespace tachyon::cuda_test {
namespace {

// residual += x · wᵀ (+ bias) with the add in the product's epilogue (cuBLASLt's C input,
// or the matrix-vector kernel's for one row without bias): against the CPU's product
// added to the same starting values in f32. The first call of each shape family also
// tunes the algorithm choice, which must not add twice.
TEST_P(CudaOpsTest, LinearResidual) {
  const LinearCase cases[] = {{1, 64, 128}, {2, 129, 256}, {64, 4096, 512}, {1000, 257, 96}};
  for (const LinearCase& c : cases) {
    for (bool with_bias : {false, true}) {
      Tensor x = input({c.m, c.k});
      Tensor w = input({c.n, c.k}, 1.f / std::sqrt(static_cast<float>(c.k)));
      Tensor b = rounded(randn({c.n}, rng_, 0.5f), dt_);
      Tensor start = rounded(randn({c.m, c.n}, rng_, 2.f), dt_);
      const std::vector<double> want = added(x, w, with_bias ? b : Tensor(), start);
      const std::vector<double> base = host_values(start);
      Tensor out = dev(start);
      const std::string what = "linear_residual " + std::to_string(c.m) + "x" +
                               std::to_string(c.n) + "x" + std::to_string(c.k) +
                               (with_bias ? " bias" : "");
      gpu_->linear_residual(
          dev(x),
          LinearWeights{gpu_->prepare_weight(w), with_bias ? gpu_->prepare_weight(b) : Tensor()},
          out, nullptr);
      if (dt_ != DType::kF32) {
        EXPECT_EQ(gpu_->last_linear_path() == cuda::CudaBackend::LinearPath::kGemv,
                  c.m == 1 && !with_bias)
            << what;
      }
      ASSERT_NE(host_values(*gpu_, out), base) << what;
      expect_near(host_values(*gpu_, out), want, bound_for(dt_), tag(what));
    }
  }
}

// The matrix-vector kernel for 1..4 rows, with row lengths that end mid-batch or
// mid-share, and f32 output: x through L1 (4 x 14336: too long for shared memory), x in
// shared memory on persistent blocks of 8 warps and, from k = 8192, of 16, and the
// one-group blocks for products of more waves than the persistent ones take (20011 and
// 40000 columns). The last two cases give each persistent block many column groups.
// With add, y += the product: against the product added to y's starting values.
TEST_P(CudaOpsTest, Gemv) {
  if (dt_ == DType::kF32) GTEST_SKIP() << "16-bit kernel";
  const LinearCase cases[] = {{1, 37, 8},       {2, 1000, 4104}, {3, 300, 264},   {4, 64, 14336},
                              {1, 4099, 14336}, {3, 20011, 520}, {1, 40000, 4096}};
  for (const LinearCase& c : cases) {
    Tensor x = input({c.m, c.k});
    Tensor w = input({c.n, c.k}, 1.f / std::sqrt(static_cast<float>(c.k)));
    Tensor ref = Tensor::zeros({c.m, c.n}, DType::kF32);
    cpu_->linear(x, w, Tensor(), ref, 0, Activation::kIdentity);
    Tensor xd = dev(x), wd = gpu_->prepare_weight(w);
    for (DType yt : {dt_, DType::kF32}) {
      const std::string what = "gemv " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                               std::to_string(c.k) + (yt == DType::kF32 ? " f32" : "");
      const double bound = yt == DType::kF32 ? 1e-4 : bound_for(dt_);
      Tensor out = poisoned(*gpu_, {c.m, c.n}, yt);
      cuda::launch_gemv(xd.raw(), wd.raw(), dt_, out.raw(), yt, c.m, c.n, c.k, c.n, false,
                        gpu_->stream());
      expect_near(host_values(*gpu_, out), host_values(ref), bound, tag(what));
      Tensor start = rounded(randn({c.m, c.n}, rng_, 2.f), yt);
      Tensor sum = yt == DType::kF32 ? dev_f32(start) : dev(start);
      cuda::launch_gemv(xd.raw(), wd.raw(), dt_, sum.raw(), yt, c.m, c.n, c.k, c.n, true,
                        gpu_->stream());
      expect_near(host_values(*gpu_, sum), added(x, w, Tensor(), start), bound, tag(what + " add"));
    }
  }
}

// The fused pass against rotary() then write_kv() on the same device (same roundings:
// the 16-bit results must be identical), both styles, partial rotary, skipped slots.
TEST_P(CudaOpsTest, RotaryWriteKvFused) {
  for (RotaryStyle style : {RotaryStyle::kHalf, RotaryStyle::kInterleaved, RotaryStyle::kHalf2D}) {
    for (auto [hd, rot] : {std::pair<int, int>{64, 64}, {80, 32}, {128, 128}, {256, 64}}) {
      const QkvLayout layout{8, 2, hd};
      const int64_t n = 13;
      const int32_t nb = 5, bs = 4;
      Tensor qkv = input({n, layout.row_cols()});
      Tensor cs = Tensor::empty({n, rot}, DType::kF32);
      for (int64_t t = 0; t < n; ++t)
        for (int p = 0; p < rot / 2; ++p) {
          const double ang = (t + 5) * std::pow(10000.0, -2.0 * p / rot);
          cs.data<float>()[t * rot + p] = static_cast<float>(std::cos(ang));
          cs.data<float>()[t * rot + rot / 2 + p] = static_cast<float>(std::sin(ang));
        }
      std::vector<int32_t> slots(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) slots[t] = static_cast<int32_t>((t * 7 + 3) % (nb * bs));
      slots[2] = -1;
      const Shape cshape = {nb, layout.num_kv_heads, bs, hd};
      Tensor init = input(cshape);
      Tensor cs_g = dev_f32(cs), slots_g = to_gpu_i32(*gpu_, slots);
      Tensor a = dev(qkv), b = dev(qkv);
      LayerKvCache ca{dev(init), dev(init)}, cb{dev(init), dev(init)};
      gpu_->rotary(a, layout, cs_g, style, rot);
      gpu_->write_kv(a, layout, slots_g, ca);
      gpu_->rotary_write_kv(b, layout, cs_g, style, rot, slots_g, cb);
      const std::string what = std::string(style == RotaryStyle::kHalf ? "half" : "interleaved") +
                               " hd=" + std::to_string(hd) + " rot=" + std::to_string(rot);
      // 16-bit: the same roundings, so identical; f32: only FMA contraction may differ.
      const double tol = dt_ == DType::kF32 ? 1e-6 : 0.0;
      expect_near(host_values(*gpu_, b), host_values(*gpu_, a), tol, tag("qkv " + what));
      expect_near(host_values(*gpu_, cb.k), host_values(*gpu_, ca.k), tol, tag("k cache " + what));
      expect_near(host_values(*gpu_, cb.v), host_values(*gpu_, ca.v), tol, tag("v cache " + what));
    }
  }
}

TEST_P(CudaOpsTest, PrepareWeightConvertsEveryDtype) {
  // Large enough to need several pieces through the pinned ring.
  Tensor w = randn({4096, 1100}, rng_);
  for (DType src : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor h = w.to(src);
    Tensor g = gpu_->prepare_weight(h);
    EXPECT_EQ(g.dtype(), dt_);
    EXPECT_EQ(g.shape(), h.shape());
    expect_near(host_values(*gpu_, g), host_values(rounded(h.to(DType::kF32), dt_)), 1e-7,
                tag("prepare_weight from " + dtype_label(src)));
  }
  Tensor v = gpu_->prepare_weight(randn({300}, rng_).to(DType::kBF16));
  EXPECT_EQ(v.dtype(), DType::kF32);  // vectors stay f32
}

// Block copies refuse blocks out of range, pageable host memory and blocks of another
// shape (the copies themselves: the op harness); swap memory is host memory.
TEST_P(CudaOpsTest, BlockCopiesRefuseBadArguments) {
  const int32_t nb = 7, ns = 4;
  Tensor cache = dev(input({nb, 2, 5, 96}));
  EXPECT_THROW(gpu_->copy_blocks(cache, {{0, nb}}), InvalidArgument);
  Tensor swap = gpu_->alloc_swap({ns, 2, 5, 96}, dt_);
  ASSERT_TRUE(swap.device().is_cpu());
  Tensor pageable = Tensor::empty({ns, 2, 5, 96}, dt_);
  EXPECT_THROW(gpu_->copy_blocks_between(cache, pageable, {{0, 0}}), InvalidArgument);
  EXPECT_THROW(gpu_->copy_blocks_between(cache, swap, {{0, ns}}), InvalidArgument);
  EXPECT_THROW(gpu_->copy_blocks_between(swap, cache, {{-1, 0}}), InvalidArgument);
  Tensor other = gpu_->alloc_swap({ns, 2, 5, 64}, dt_);
  EXPECT_THROW(gpu_->copy_blocks_between(cache, other, {{0, 0}}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOpsTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
