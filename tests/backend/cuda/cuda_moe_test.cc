// MoE routing and grouped expert MLPs on the GPU against the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_test_util.h"
#include "backend/ops.h"

namespace tachyon::cuda_test {
namespace {

class CudaMoeTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TACHYON_REQUIRE_GPU();
    dt_ = GetParam();
    gpu_ = make_gpu(dt_);
    cpu_ = make_cpu_backend();
    rng_.seed(7);
  }
  DType dt_ = DType::kBF16;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::unique_ptr<Backend> cpu_;
  std::mt19937 rng_;
};

TEST_P(CudaMoeTest, RouteMatchesCpu) {
  for (auto [n, e, k] :
       {std::tuple<int64_t, int, int>{1, 8, 2}, {300, 60, 4}, {57, 4, 1}, {9, 128, 8}}) {
    for (bool renorm : {false, true}) {
      Tensor logits = rounded(randn({n, e}, rng_, 2.f), dt_);
      // Exact ties: the lower expert id wins on both backends.
      logits.data<float>()[0] = logits.data<float>()[1] = 9.f;
      Tensor ids = Tensor::empty({n, k}, DType::kI32), w = Tensor::empty({n, k}, DType::kF32);
      cpu_->moe_route(logits, k, renorm, ids, w);
      Tensor ids_g = poisoned(*gpu_, {n, k}, DType::kI32),
             w_g = poisoned(*gpu_, {n, k}, DType::kF32);
      gpu_->moe_route(to_gpu(*gpu_, logits, dt_), k, renorm, ids_g, w_g);
      Tensor ids_h = gpu_->to_host(ids_g);
      for (int64_t i = 0; i < n * k; ++i)
        ASSERT_EQ(ids_h.data<int32_t>()[i], ids.data<int32_t>()[i])
            << "entry " << i << " of " << n << "x" << e;
      expect_near(host_values(*gpu_, w_g), host_values(w), 1e-5,
                  dtype_label(dt_) + " route weights E=" + std::to_string(e));
    }
  }
}

TEST_P(CudaMoeTest, ExpertsMatchCpu) {
  for (bool fused : {true, false}) {
    for (auto [n, e, k] : {std::tuple<int64_t, int, int>{1, 8, 2}, {200, 8, 2}, {33, 16, 4}}) {
      const int64_t d = 128, inter = 96;
      std::vector<MoeExpertWeights> host(static_cast<size_t>(e)), dev(static_cast<size_t>(e));
      const float s_in = 1.f / std::sqrt(static_cast<float>(d));
      const float s_mid = 1.f / std::sqrt(static_cast<float>(inter));
      for (int i = 0; i < e; ++i) {
        MoeExpertWeights& h = host[static_cast<size_t>(i)];
        if (fused) {
          h.gate_up = rounded(randn({2 * inter, d}, rng_, s_in), dt_);
        } else {
          h.gate = rounded(randn({inter, d}, rng_, s_in), dt_);
          h.up = rounded(randn({inter, d}, rng_, s_in), dt_);
        }
        h.down = rounded(randn({d, inter}, rng_, s_mid), dt_);
        MoeExpertWeights& g = dev[static_cast<size_t>(i)];
        g.gate_up = gpu_->prepare_weight(h.gate_up);
        g.gate = gpu_->prepare_weight(h.gate);
        g.up = gpu_->prepare_weight(h.up);
        g.down = gpu_->prepare_weight(h.down);
      }
      Tensor x = rounded(randn({n, d}, rng_), dt_);
      Tensor logits = rounded(randn({n, e}, rng_), dt_);
      Tensor ids = Tensor::empty({n, k}, DType::kI32), w = Tensor::empty({n, k}, DType::kF32);
      cpu_->moe_route(logits, k, true, ids, w);
      for (bool accumulate : {false, true}) {
        Tensor base = rounded(randn({n, d}, rng_), dt_);
        Tensor ref = accumulate ? base.clone() : Tensor::empty({n, d}, DType::kF32);
        cpu_->moe_experts(x, ids, w, host, Activation::kSilu, accumulate, ref);
        Tensor out = accumulate ? to_gpu(*gpu_, base, dt_) : poisoned(*gpu_, {n, d}, dt_);
        gpu_->moe_experts(to_gpu(*gpu_, x, dt_), to_gpu(*gpu_, ids, DType::kI32),
                          to_gpu(*gpu_, w, DType::kF32), dev, Activation::kSilu, accumulate, out);
        expect_near(host_values(*gpu_, out), host_values(ref), bound_for(dt_),
                    dtype_label(dt_) + " experts " + (fused ? "gate_up" : "gate+up") +
                        " T=" + std::to_string(n) + " E=" + std::to_string(e) +
                        " k=" + std::to_string(k) + (accumulate ? " +=" : ""));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMoeTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
