// Dense, norm, embedding and elementwise ops of the CPU backend against float64
// references on random data.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/vec.h"
#include "backend/ops.h"
#include "op_test_util.h"

namespace tachyon {
namespace {

using testing_util::as_f64;
using testing_util::expect_close;
using testing_util::random_tensor;

double act_f64(double x, Activation act) {
  switch (act) {
    case Activation::kIdentity:
      return x;
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
    case Activation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kQuickGelu:
      return x / (1 + std::exp(-1.702 * x));
  }
  return x;
}

const Activation kActs[] = {Activation::kIdentity, Activation::kSilu, Activation::kGelu,
                            Activation::kGeluTanh, Activation::kRelu, Activation::kQuickGelu};

class OpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
  std::mt19937 rng_{1234};
};

TEST_F(OpsTest, ActivationsMatchFloat64) {
  for (Activation act : kActs) {
    // Wide range, odd length so that the vector tail runs too.
    Tensor x = random_tensor({3, 37}, rng_, 4.f);
    std::vector<double> want;
    for (double v : as_f64(x)) want.push_back(act_f64(v, act));
    be_->activation(x, act);
    expect_close(x, want, 2e-6, 2e-6, "activation");
  }
}

TEST_F(OpsTest, GatedActivation) {
  for (Activation act : kActs) {
    Tensor in = random_tensor({5, 2 * 19}, rng_, 2.f);
    Tensor out = be_->alloc({5, 19}, DType::kF32);
    be_->gated_activation(in, act, out);
    auto v = as_f64(in);
    std::vector<double> want;
    for (int t = 0; t < 5; ++t)
      for (int i = 0; i < 19; ++i) want.push_back(act_f64(v[t * 38 + i], act) * v[t * 38 + 19 + i]);
    expect_close(out, want, 1e-5, 1e-5, "gated");
  }
}

TEST_F(OpsTest, LinearWithBiasActivationAndColumnOffset) {
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int m = 7, k = 45, n = 23, off = 5, width = 31;
    Tensor x = random_tensor({m, k}, rng_);
    Tensor w = random_tensor({n, k}, rng_, 0.2f, wd);
    Tensor b = random_tensor({n}, rng_);
    Tensor out = random_tensor({m, width}, rng_);
    auto before = as_f64(out);
    be_->linear(x, w, b, out, off, Activation::kSilu);
    auto xv = as_f64(x), wv = as_f64(w), bv = as_f64(b);
    std::vector<double> want = before;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = bv[j];
        for (int p = 0; p < k; ++p) acc += xv[i * k + p] * wv[j * k + p];
        want[i * width + off + j] = act_f64(acc, Activation::kSilu);
      }
    expect_close(out, want, 1e-4, 1e-5, "linear");
  }
}

TEST_F(OpsTest, EmbeddingAllDtypesScaleAndAccumulate) {
  for (DType td : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor table = random_tensor({50, 33}, rng_, 1.f, td);
    std::vector<int32_t> ids = {3, 49, 0, 17, 17};
    Tensor id = be_->upload_i32(ids.data(), 5, {});
    Tensor out = random_tensor({5, 33}, rng_);
    auto before = as_f64(out);
    auto tv = as_f64(table);
    be_->embedding(table, id, 0, 1.f, false, out);
    std::vector<double> want;
    for (int t = 0; t < 5; ++t)
      for (int i = 0; i < 33; ++i) want.push_back(tv[ids[t] * 33 + i]);
    expect_close(out, want, 0, 0, "embedding");
    // Learned positions: accumulate with an id offset; scaled lookup.
    Tensor pos = be_->upload_i32(std::vector<int32_t>{0, 1, 2, 3, 4}.data(), 5, {});
    be_->embedding(table, pos, 2, 0.5f, true, out);
    for (int t = 0; t < 5; ++t)
      for (int i = 0; i < 33; ++i) want[t * 33 + i] += 0.5 * tv[(t + 2) * 33 + i];
    expect_close(out, want, 1e-6, 1e-6, "embedding accumulate");
  }
  (void)0;
}

TEST_F(OpsTest, AddNormRmsAndLayerNorm) {
  for (NormType type : {NormType::kRMSNorm, NormType::kLayerNorm}) {
    for (float offset : {0.f, 1.f}) {
      const int n = 6, d = 67;
      Tensor res = random_tensor({n, d}, rng_, 1.f, DType::kF32, 0.3f);
      Tensor d1 = random_tensor({n, d}, rng_);
      Tensor d2 = random_tensor({n, d}, rng_);
      NormParams p;
      p.type = type;
      p.weight = random_tensor({d}, rng_, 0.5f, DType::kF32, 1.f);
      if (type == NormType::kLayerNorm) p.bias = random_tensor({d}, rng_, 0.5f);
      p.eps = 1e-5f;
      p.weight_offset = offset;
      auto r = as_f64(res), a = as_f64(d1), b = as_f64(d2), w = as_f64(p.weight);
      std::vector<double> bias = p.bias ? as_f64(p.bias) : std::vector<double>(d, 0.0);
      std::vector<double> sum(n * d), want(n * d);
      for (int t = 0; t < n; ++t) {
        double mean = 0, sq = 0;
        for (int i = 0; i < d; ++i) sum[t * d + i] = r[t * d + i] + a[t * d + i] + b[t * d + i];
        for (int i = 0; i < d; ++i) mean += sum[t * d + i] / d;
        if (type == NormType::kRMSNorm) mean = 0;
        for (int i = 0; i < d; ++i) sq += (sum[t * d + i] - mean) * (sum[t * d + i] - mean) / d;
        for (int i = 0; i < d; ++i)
          want[t * d + i] =
              (sum[t * d + i] - mean) / std::sqrt(sq + 1e-5) * (offset + w[i]) + bias[i];
      }
      Tensor out = be_->alloc({n, d}, DType::kF32);
      be_->add_norm(res, d1, d2, p, out);
      expect_close(res, sum, 1e-6, 1e-6, "residual");
      expect_close(out, want, 1e-5, 1e-5, "norm");
      // In place, no deltas.
      be_->add_norm(res, Tensor(), Tensor(), p, res);
      expect_close(res, want, 1e-5, 1e-5, "norm in place");
    }
  }
}

TEST_F(OpsTest, QkNormPerHead) {
  QkvLayout l{4, 2, 8};
  Tensor qkv = random_tensor({3, l.row_cols()}, rng_, 2.f);
  NormParams qn, kn;
  qn.weight = random_tensor({8}, rng_, 0.3f, DType::kF32, 1.f);
  kn.weight = random_tensor({8}, rng_, 0.3f, DType::kF32, 1.f);
  qn.eps = kn.eps = 1e-6f;
  auto v = as_f64(qkv), qw = as_f64(qn.weight), kw = as_f64(kn.weight);
  std::vector<double> want = v;
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < 6; ++h) {  // 4 q heads, 2 k heads; v untouched
      double ss = 0;
      for (int i = 0; i < 8; ++i) ss += v[t * 64 + h * 8 + i] * v[t * 64 + h * 8 + i] / 8;
      for (int i = 0; i < 8; ++i)
        want[t * 64 + h * 8 + i] =
            v[t * 64 + h * 8 + i] / std::sqrt(ss + 1e-6) * (h < 4 ? qw[i] : kw[i]);
    }
  be_->qk_norm(qkv, l, qn, kn);
  expect_close(qkv, want, 1e-5, 1e-5, "qk_norm");
}

TEST_F(OpsTest, ElementwiseOps) {
  Tensor a = random_tensor({4, 9}, rng_, 30.f);
  Tensor b = random_tensor({4, 9}, rng_);
  Tensor out = be_->alloc({4, 9}, DType::kF32);
  be_->add(a, b, out);
  auto av = as_f64(a), bv = as_f64(b);
  std::vector<double> want;
  for (size_t i = 0; i < av.size(); ++i) want.push_back(av[i] + bv[i]);
  expect_close(out, want, 1e-5, 1e-6, "add");

  // out may be b: the residual update of a block whose residual is its scaled norm output.
  Tensor sum = b.clone();
  be_->scale_add(a, 2.6457513f, sum, sum);
  want.clear();
  for (size_t i = 0; i < av.size(); ++i) want.push_back(2.6457513 * av[i] + bv[i]);
  expect_close(sum, want, 1e-5, 1e-6, "scale_add");

  Tensor c = a.clone();
  be_->softcap(c, 20.f);
  want.clear();
  for (double x : av) want.push_back(20 * std::tanh(x / 20));
  expect_close(c, want, 1e-5, 1e-6, "softcap");

  Tensor d = a.clone();
  be_->clamp(d, 8.f);
  want.clear();
  for (double x : av) want.push_back(std::min(8.0, std::max(-8.0, x)));
  expect_close(d, want, 0, 0, "clamp");

  std::vector<int32_t> rows = {3, 0, 3};
  Tensor r = be_->upload_i32(rows.data(), 3, {});
  Tensor g = be_->alloc({3, 9}, DType::kF32);
  be_->gather_rows(a, r, g);
  want.clear();
  for (int32_t row : rows)
    for (int i = 0; i < 9; ++i) want.push_back(av[row * 9 + i]);
  expect_close(g, want, 0, 0, "gather");

  Tensor logit = random_tensor({4, 1}, rng_, 2.f);
  Tensor acc = b.clone();
  be_->add_sigmoid_gated(a, logit, acc);
  auto lv = as_f64(logit);
  want.clear();
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 9; ++i)
      want.push_back(bv[t * 9 + i] + av[t * 9 + i] / (1 + std::exp(-lv[t])));
  expect_close(acc, want, 1e-4, 1e-5, "sigmoid gated");
}

// A step's input ids taken from the ids the step before chose: negative sources give 0,
// pairs out of range on either side are skipped, the other ids stay.
TEST_F(OpsTest, ScatterIds) {
  const std::vector<int32_t> src = {7, -2, 40, 11};
  const std::vector<int32_t> pairs = {0, 2, 3, 1, 5, 0, -1, 3, 2, 4, 6, 3, 4, -1};
  std::vector<int32_t> ids = {100, 101, 102, 103, 104, 105};
  Tensor s = be_->upload_i32(src.data(), 4, {});
  Tensor p = be_->upload(pairs.data(), {7, 2}, DType::kI32, {});
  Tensor out = be_->upload_i32(ids.data(), 6, {});
  be_->scatter_ids(s, p, out);
  std::vector<int32_t> got(6);
  be_->download(out, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{40, 101, 102, 0, 104, 7}));
}

TEST_F(OpsTest, ConvertRowMatchesScalarConversion) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Tensor t = random_tensor({1, 29}, rng_, 3.f, dt);
    std::vector<float> out(29);
    cpu::convert_row(t.raw(), dt, 29, out.data());
    for (int i = 0; i < 29; ++i)
      EXPECT_EQ(out[i], load_as_f32(t.raw(), dt, static_cast<size_t>(i)));
  }
}

// The f64 sums the norms use, against plain float64 sums (tails of every length).
TEST_F(OpsTest, F64RowSums) {
  for (int n : {0, 1, 3, 4, 7, 64, 257}) {
    Tensor t = random_tensor({1, std::max(n, 1)}, rng_, 2.f, DType::kF32, 0.7f);
    const float* x = t.data<float>();
    double sum = 0, sq = 0, sqc = 0;
    for (int i = 0; i < n; ++i) {
      sum += x[i];
      sq += double{x[i]} * x[i];
      sqc += (x[i] - 0.7) * (x[i] - 0.7);
    }
    EXPECT_NEAR(cpu::sum_f64(x, n), sum, 1e-12 * (1 + std::abs(sum))) << n;
    EXPECT_NEAR(cpu::sum_squares_f64(x, n), sq, 1e-12 * (1 + sq)) << n;
    EXPECT_NEAR(cpu::sum_squares_f64(x, n, 0.7), sqc, 1e-12 * (1 + sqc)) << n;
  }
}

}  // namespace
}  // namespace tachyon
