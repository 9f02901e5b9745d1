// The CPU backend's MoE ops (moe.cc): routing and the experts' gated products against
// float64 references on random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/ops.h"
#include "op_test_util.h"

namespace tachyon {
namespace {

using testing_util::as_f64;
using testing_util::expect_close;
using testing_util::random_tensor;

class CpuMoeTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
  std::mt19937 rng_{99};
};

TEST_F(CpuMoeTest, MoeRouteAndExperts) {
  const int T = 9, D = 12, I = 7, E = 5, K = 2;
  for (bool renorm : {false, true}) {
    for (bool fused : {false, true}) {
      Tensor logits = random_tensor({T, E}, rng_, 2.f);
      Tensor ids = be_->alloc({T, K}, DType::kI32), w = be_->alloc({T, K}, DType::kF32);
      be_->moe_route(logits, K, renorm, ids, w);
      auto lv = as_f64(logits);
      std::vector<double> want_w;
      std::vector<int> want_ids;
      for (int t = 0; t < T; ++t) {
        std::vector<double> p(E);
        double mx = *std::max_element(lv.begin() + t * E, lv.begin() + (t + 1) * E), sum = 0;
        for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(lv[t * E + e] - mx));
        std::vector<int> order(E);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
        double picked = 0;
        for (int k = 0; k < K; ++k) picked += p[order[k]] / sum;
        for (int k = 0; k < K; ++k) {
          want_ids.push_back(order[k]);
          want_w.push_back(p[order[k]] / sum / (renorm ? picked : 1.0));
        }
      }
      for (int i = 0; i < T * K; ++i) EXPECT_EQ(ids.data<int32_t>()[i], want_ids[i]);
      expect_close(w, want_w, 1e-6, 1e-6, "routing weights");

      std::vector<MoeExpertWeights> experts(E);
      std::vector<std::vector<double>> g(E), u(E), dn(E);
      for (int e = 0; e < E; ++e) {
        Tensor gate = random_tensor({I, D}, rng_, 0.3f, DType::kBF16);
        Tensor up = random_tensor({I, D}, rng_, 0.3f, DType::kBF16);
        experts[e].down = random_tensor({D, I}, rng_, 0.3f, DType::kBF16);
        g[e] = as_f64(gate);
        u[e] = as_f64(up);
        dn[e] = as_f64(experts[e].down);
        if (fused) {
          Tensor gu = Tensor::empty({2 * I, D}, DType::kBF16);
          std::copy_n(static_cast<const uint16_t*>(gate.raw()), I * D,
                      static_cast<uint16_t*>(gu.raw()));
          std::copy_n(static_cast<const uint16_t*>(up.raw()), I * D,
                      static_cast<uint16_t*>(gu.raw()) + I * D);
          experts[e].gate_up = gu;
        } else {
          experts[e].gate = gate;
          experts[e].up = up;
        }
      }
      Tensor x = random_tensor({T, D}, rng_);
      Tensor out = random_tensor({T, D}, rng_);
      auto base = as_f64(out);
      auto xv = as_f64(x);
      be_->moe_experts(x, ids, w, experts, Activation::kSilu, true, out);
      std::vector<double> want = base;
      for (int t = 0; t < T; ++t)
        for (int k = 0; k < K; ++k) {
          const int e = want_ids[t * K + k];
          std::vector<double> h(I);
          for (int i = 0; i < I; ++i) {
            double a = 0, b = 0;
            for (int d = 0; d < D; ++d) {
              a += xv[t * D + d] * g[e][i * D + d];
              b += xv[t * D + d] * u[e][i * D + d];
            }
            h[i] = a / (1 + std::exp(-a)) * b;
          }
          for (int d = 0; d < D; ++d) {
            double y = 0;
            for (int i = 0; i < I; ++i) y += h[i] * dn[e][d * I + i];
            want[t * D + d] += want_w[t * K + k] * y;
          }
        }
      expect_close(out, want, 1e-5, 1e-5, "moe experts");
    }
  }
}

}  // namespace
}  // namespace tachyon
