// The CUDA backend's quantized products (cuda_quant.cc, quant_linear.cu) against a float64
// reference over the dequantized weights (core/quant.h's dequantize: the meaning of the
// matrix), on random data: int4 and int8 in groups of 32 and 128 and per channel,
// symmetric and not, with and without an act-order permutation and a bias, at m = 1 and
// 3 (the matrix-vector kernel), 16, 100 and 600 (dequantized pieces on the dense GEMM);
// fp8 per channel, per tensor and in 128 x 128 blocks (weights only: the activations
// stay 16-bit, so the reference is the same). Outputs in the compute dtype are held to
// bound_for(dtype) (the output's rounding, and on the GEMM path the weights rounded to
// the dtype); f32 outputs to 1e-4 on the matrix-vector kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/quant_weight.h"
#include "core/error.h"
#include "core/quant.h"

namespace tachyon::cuda_test {
namespace {

using Path = cuda::CudaBackend::LinearPath;

class CudaQuantLinearTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TACHYON_REQUIRE_GPU();
    dt_ = GetParam();
    gpu_ = make_gpu(dt_);
    rng_.seed(4321);
  }

  // A random act-order permutation of [0, k).
  Tensor random_perm(int64_t k) {
    std::vector<int32_t> p(static_cast<size_t>(k));
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng_);
    Tensor t = Tensor::empty({k}, DType::kI32);
    std::copy(p.begin(), p.end(), t.data<int32_t>());
    return t;
  }

  // y = x · dequantize(m)ᵀ (+ bias, + start) in float64.
  std::vector<double> reference(const Tensor& x, const QuantizedMatrix& m, const Tensor& bias,
                                const Tensor& start = Tensor()) {
    const Tensor w = dequantize(m);
    const int64_t rows = x.dim(0), n = m.n, k = m.k;
    std::vector<double> y(static_cast<size_t>(rows * n));
    const float* xp = x.data<float>();
    const float* wp = w.data<float>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = bias ? bias.data<float>()[j] : 0.0;
        if (start) s += start.data<float>()[i * n + j];
        for (int64_t c = 0; c < k; ++c)
          s += static_cast<double>(xp[i * k + c]) * static_cast<double>(wp[j * k + c]);
        y[static_cast<size_t>(i * n + j)] = s;
      }
    return y;
  }

  // linear() of m at each row count, out in the compute dtype (and f32 at the first).
  void check(const std::shared_ptr<const QuantizedMatrix>& m, bool with_bias,
             const std::vector<int64_t>& rows, const std::string& name) {
    const Tensor wq = gpu_->prepare_linear_weight(quantized_view(m));
    ASSERT_EQ(wq.dim(0), m->n);
    ASSERT_EQ(wq.dim(1), m->k);
    Tensor bias = with_bias ? randn({m->n}, rng_, 0.5f) : Tensor();
    const Tensor bias_d = with_bias ? gpu_->prepare_weight(bias) : Tensor();
    for (int64_t r : rows) {
      const Tensor x = rounded(randn({r, m->k}, rng_), dt_);
      const Tensor xd = to_gpu(*gpu_, x, dt_);
      const std::vector<double> want = reference(x, *m, bias);
      const Path path = r <= cuda::kQuantGemvMaxRows ? Path::kQuantGemv : Path::kQuantDequant;
      for (DType yt : {dt_, DType::kF32}) {
        if (yt == DType::kF32 && r != rows.front()) continue;
        const std::string what = name + (with_bias ? " bias" : "") + " m=" + std::to_string(r) +
                                 (yt == DType::kF32 ? " f32" : "");
        Tensor out = poisoned(*gpu_, {r, m->n}, yt);
        gpu_->linear(xd, wq, bias_d, out, 0, Activation::kIdentity);
        EXPECT_TRUE(gpu_->last_linear_path() == path) << what;
        const double bound = yt == DType::kF32 && path == Path::kQuantGemv ? 1e-4 : bound_for(dt_);
        expect_near(host_values(*gpu_, out), want, bound, tag(what));
      }
    }
    // linear_residual: the product added into a residual.
    const int64_t r = rows.back();
    const Tensor x = rounded(randn({r, m->k}, rng_), dt_);
    const Tensor start = rounded(randn({r, m->n}, rng_, 2.f), dt_);
    Tensor res = to_gpu(*gpu_, start, dt_);
    gpu_->linear_residual(to_gpu(*gpu_, x, dt_), LinearWeights{wq, bias_d}, res, nullptr);
    expect_near(host_values(*gpu_, res), reference(x, *m, bias, start), bound_for(dt_),
                tag(name + " residual m=" + std::to_string(r)));
  }

  std::string tag(const std::string& s) const { return dtype_label(dt_) + " " + s; }

  DType dt_ = DType::kBF16;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::mt19937 rng_;
};

TEST_P(CudaQuantLinearTest, IntegerGroups) {
  const std::vector<int64_t> rows = {1, 3, 16, 100, 600};
  const int64_t n = 300, k = 512;
  for (int bits : {4, 8})
    for (int64_t g : {int64_t{32}, int64_t{128}, k})
      for (bool sym : {true, false})
        for (bool perm : {false, true}) {
          const Tensor w = randn({n, k}, rng_, 0.05f);
          auto m = quantize_int(w, bits, g, sym);
          if (perm) m->perm = random_perm(k);
          check(m, perm && !sym, rows, m->str());
        }
}

// Longer rows (several batches of tiles per warp), n not a multiple of the 16-row bands,
// row counts on both sides of kQuantGemvMaxRows.
TEST_P(CudaQuantLinearTest, LongRows) {
  for (int bits : {4, 8}) {
    const Tensor w = randn({77, 4096}, rng_, 0.02f);
    auto m = quantize_int(w, bits, 128, false);
    check(m, true, {1, 2, 5, 8, 9, 17, 32, 33}, m->str());
  }
}

TEST_P(CudaQuantLinearTest, Fp8Blocks) {
  const int64_t n = 300, k = 512;
  for (auto [bn, bk] : {std::pair<int64_t, int64_t>{1, k}, {n, k}, {128, 128}}) {
    const Tensor w = randn({n, k}, rng_, 0.05f);
    auto m = quantize_fp8(w, bn, bk);
    check(m, bn == 128, {1, 3, 16, 100, 600}, m->str());
  }
}

// Groups the kernels do not take (not whole 16-column steps): the dense weight they mean.
TEST_P(CudaQuantLinearTest, IrregularGroupsRunDense) {
  const Tensor w = randn({40, 96}, rng_, 0.1f);
  auto m = quantize_int(w, 4, 12, false);
  const Tensor wq = gpu_->prepare_linear_weight(quantized_view(m));
  EXPECT_EQ(wq.dtype(), dt_);
  for (int64_t r : {int64_t{1}, int64_t{20}}) {
    const Tensor x = rounded(randn({r, 96}, rng_), dt_);
    Tensor out = poisoned(*gpu_, {r, 40}, dt_);
    gpu_->linear(to_gpu(*gpu_, x, dt_), wq, Tensor(), out, 0, Activation::kIdentity);
    expect_near(host_values(*gpu_, out), reference(x, *m, Tensor()), bound_for(dt_),
                tag("int4 g12 m=" + std::to_string(r)));
  }
}

// Quantized MoE experts (int4 gate_up, int8 down; stacked and separate gate/up): the
// same products as the experts' dequantized weights given as dense ones.
TEST_P(CudaQuantLinearTest, MoeExperts) {
  const int64_t d = 256, inter = 128, E = 4, top_k = 2;
  for (bool stacked : {true, false})
    for (int64_t n : {int64_t{3}, int64_t{200}}) {
      std::vector<MoeExpertWeights> quant(E), dense(E);
      for (int64_t e = 0; e < E; ++e) {
        auto prep = [&](int bits, int64_t rows, int64_t cols, Tensor& q, Tensor& w) {
          auto m = quantize_int(randn({rows, cols}, rng_, 0.05f), bits, 32, bits == 8);
          q = gpu_->prepare_weight(quantized_view(m));
          w = gpu_->prepare_weight(dequantize(*m));
        };
        MoeExpertWeights& qe = quant[static_cast<size_t>(e)];
        MoeExpertWeights& de = dense[static_cast<size_t>(e)];
        if (stacked) {
          prep(4, 2 * inter, d, qe.gate_up, de.gate_up);
        } else {
          prep(4, inter, d, qe.gate, de.gate);
          prep(4, inter, d, qe.up, de.up);
        }
        prep(8, d, inter, qe.down, de.down);
      }
      const Tensor x = rounded(randn({n, d}, rng_), dt_);
      Tensor ids = Tensor::empty({n, top_k}, DType::kI32);
      Tensor wts = Tensor::empty({n, top_k}, DType::kF32);
      for (int64_t i = 0; i < n * top_k; ++i) {
        ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + i / top_k) % E);
        wts.data<float>()[i] = 0.25f + 0.5f * static_cast<float>(i % 3);
      }
      const Tensor xd = to_gpu(*gpu_, x, dt_);
      const Tensor idd = gpu_->upload(ids.raw(), ids.shape(), DType::kI32, {});
      const Tensor wd = gpu_->upload(wts.raw(), wts.shape(), DType::kF32, {});
      Tensor got = poisoned(*gpu_, {n, d}, dt_), want = poisoned(*gpu_, {n, d}, dt_);
      gpu_->moe_experts(xd, idd, wd, quant, Activation::kSilu, false, got);
      gpu_->moe_experts(xd, idd, wd, dense, Activation::kSilu, false, want);
      expect_near(host_values(*gpu_, got), host_values(*gpu_, want), bound_for(dt_),
                  tag(std::string("moe ") + (stacked ? "gate_up" : "gate, up") +
                      " n=" + std::to_string(n)));
    }
}

// A matrix that breaks its own rules is refused at load, naming what is wrong.
TEST_P(CudaQuantLinearTest, BadMatrixRefused) {
  const Tensor w = randn({16, 64}, rng_, 0.1f);
  auto m = quantize_int(w, 4, 32, false);
  m->zeros.data<uint8_t>()[3] = 16;
  EXPECT_THROW(gpu_->prepare_linear_weight(quantized_view(m)), InvalidArgument);
}

// The kernels' tiles and (scale, zero) pairs (host, no device needed), read back through
// the layout quant_linear.h states (lane l, step s, value v of each 512-byte tile), hold
// every value of the matrix at its (row, column) and zeros in the padding rows.
TEST(CudaQuantTiles, HoldTheMatrix) {
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<QuantizedMatrix>> ms;
  for (int bits : {4, 8}) ms.push_back(quantize_int(randn({37, 256}, rng, 0.1f), bits, 64, false));
  ms.push_back(quantize_fp8(randn({37, 256}, rng, 0.1f), 16, 128));
  for (const auto& m : ms) {
    ASSERT_TRUE(cuda::quant_kernels_take(*m)) << m->str();
    const cuda::QuantKind kind = cuda::quant_kind(*m);
    const bool int4 = kind == cuda::QuantKind::kInt4, fp8 = m->scheme == QuantScheme::kFp8;
    const int64_t tc = cuda::quant_tile_cols(kind), tiles = m->k / tc, bands = 3;
    const Tensor t = cuda::quant_tiles(*m);
    ASSERT_EQ(t.numel(), bands * tiles * 512) << m->str();
    const Tensor info = cuda::quant_info(*m);
    const int64_t gk = fp8 ? m->block_k : m->group_size, groups = m->k / gk;
    ASSERT_EQ(info.shape(), (Shape{bands, groups, 16, 2})) << m->str();
    const auto* tb = t.data<uint8_t>();
    const auto* ip = info.data<float>();
    for (int64_t b = 0; b < bands; ++b)
      for (int64_t ti = 0; ti < tiles; ++ti)
        for (int l = 0; l < 32; ++l)
          for (int64_t s = 0; s < tc / 16; ++s)
            for (int v = 0; v < 8; ++v) {
              const uint8_t* lane = tb + (b * tiles + ti) * 512 + l * 16;
              uint32_t got;
              if (int4) {
                const int pos = (v >> 1) + 4 * (v & 1);
                got = (lane[4 * s + pos / 2] >> (4 * (pos & 1))) & 0xF;
              } else {
                got = lane[8 * s + v];
              }
              const int64_t row = 16 * b + l / 4 + 8 * ((v >> 1) & 1);
              const int64_t col = ti * tc + 16 * s + 2 * (l % 4) + (v & 1) + 8 * (v >> 2);
              uint32_t want = 0;
              if (row < m->n) {
                const uint8_t* qr = m->q.data<uint8_t>();
                want = int4 ? (qr[row * m->k / 2 + col / 2] >> (4 * (col & 1))) & 0xF
                            : qr[row * m->k + col];
              }
              ASSERT_EQ(got, want) << m->str() << " row " << row << " col " << col;
            }
    for (int64_t row = 0; row < bands * 16; ++row)
      for (int64_t gi = 0; gi < groups; ++gi) {
        const float* p = ip + ((row / 16 * groups + gi) * 16 + row % 16) * 2;
        float s = 0.f, z = 0.f;
        if (row < m->n && fp8) {
          s = m->scales.data<float>()[(row / m->block_n) * m->scales.dim(1) + gi];
        } else if (row < m->n) {
          s = m->scales.data<float>()[row * groups + gi];
          z = m->zeros.data<uint8_t>()[row * groups + gi];
        }
        EXPECT_EQ(p[0], s) << m->str() << " row " << row << " group " << gi;
        EXPECT_EQ(p[1], z) << m->str() << " row " << row << " group " << gi;
      }
  }
  // Groups not in whole 16-column steps, k not in whole tiles: not for the kernels.
  EXPECT_FALSE(cuda::quant_kernels_take(*quantize_int(randn({4, 96}, rng, 0.1f), 4, 8, false)));
  EXPECT_FALSE(cuda::quant_kernels_take(*quantize_int(randn({4, 96}, rng, 0.1f), 4, 32, false)));
  EXPECT_TRUE(cuda::quant_kernels_take(*quantize_int(randn({4, 96}, rng, 0.1f), 8, 32, false)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaQuantLinearTest, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
