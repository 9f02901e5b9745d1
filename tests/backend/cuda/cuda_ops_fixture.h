// The fixture of the tests of the CUDA backend's own kernels and paths (the GEMMs, their
// epilogues, the folded norms, the matrix-vector kernel): a backend per compute dtype,
// the CPU backend, inputs rounded to the dtype, and the wgmma GEMM's test inputs. The
// ops themselves are held to the CPU backend by the op harness (op_harness_cuda_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/ops.h"

namespace tachyon::cuda_test {

// Rotary tables [m, rot] f32 of real angles: position pos0 + t, frequency p (base 10000),
// rot / 2 cosines then rot / 2 sines a row.
inline Tensor rotary_table(int64_t m, int rot, int64_t pos0 = 0) {
  Tensor cs = Tensor::empty({m, rot}, DType::kF32);
  for (int64_t t = 0; t < m; ++t)
    for (int p = 0; p < rot / 2; ++p) {
      const double ang = static_cast<double>(pos0 + t) * std::pow(10000.0, -2.0 * p / rot);
      cs.data<float>()[t * rot + p] = static_cast<float>(std::cos(ang));
      cs.data<float>()[t * rot + rot / 2 + p] = static_cast<float>(std::sin(ang));
    }
  return cs;
}

struct LinearCase {
  int64_t m, n, k;
};

class CudaOpsTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TACHYON_REQUIRE_GPU();
    dt_ = GetParam();
    gpu_ = make_gpu(dt_);
    cpu_ = make_cpu_backend();
    rng_.seed(1234);
  }
  // An f32 host tensor of values representable in dt_.
  Tensor input(const Shape& s, float stddev = 1.f, float mean = 0.f) {
    return rounded(randn(s, rng_, stddev, mean), dt_);
  }
  Tensor dev(const Tensor& h) { return to_gpu(*gpu_, h, dt_); }
  Tensor dev_f32(const Tensor& h) { return to_gpu(*gpu_, h, DType::kF32); }
  std::string tag(const std::string& s) const { return dtype_label(dt_) + " " + s; }
  // A device tensor's bytes.
  std::vector<uint8_t> device_bytes(const Tensor& t) {
    std::vector<uint8_t> b(t.nbytes());
    gpu_->download(t, b.data());
    return b;
  }
  // The wgmma GEMM form tests' inputs for m x n x k (gated: 2n weight rows): x (its
  // values scaled by x_scale), w, a residual to add into, the rows' scales; for the
  // rotary form, heads of 128 with one KV head, real angles, row t in slot t of a cache
  // of blocks of 16, and the error word.
  struct WgmmaInputs {
    Tensor xd, wd, start, scales, cs, slots, err;
    QkvLayout layout;
    int32_t bs = 16, nb = 0;
    // The rotary form's arguments, writing k_cache and v_cache ([nb, 1, bs, 128]).
    cuda::WgmmaRotaryKv rotary(Tensor& k_cache, Tensor& v_cache) {
      cuda::WgmmaRotaryKv r;
      r.cos_sin = cs.data<float>();
      r.rot = 128;
      r.style = cuda::KRotary::kHalf;
      r.heads = layout.num_heads;
      r.kv_heads = 1;
      r.head_dim = 128;
      r.slots = slots.data<int32_t>();
      r.k_cache = k_cache.raw();
      r.v_cache = v_cache.raw();
      r.num_blocks = nb;
      r.block_size = bs;
      r.err = err.data<int32_t>();
      return r;
    }
  };
  WgmmaInputs wgmma_inputs(int64_t m, int64_t n, int64_t k, bool gated, float x_scale = 1.f) {
    WgmmaInputs in;
    in.xd = dev(input({m, k}, x_scale));
    in.wd =
        gpu_->prepare_weight(input({gated ? 2 * n : n, k}, 1.f / std::sqrt(static_cast<float>(k))));
    in.start = input({m, n});
    in.scales = gpu_->alloc({m}, DType::kF32);
    cuda::launch_row_inv_rms(in.xd.raw(), dt_, m, k, 1e-5f, in.scales.data<float>(),
                             gpu_->stream());
    in.layout = QkvLayout{static_cast<int32_t>(n / 128 - 2), 1, 128};
    in.cs = dev_f32(rotary_table(m, 128));
    std::vector<int32_t> slots(static_cast<size_t>(m));
    for (int64_t t = 0; t < m; ++t) slots[t] = static_cast<int32_t>(t);
    in.slots = to_gpu_i32(*gpu_, slots);
    in.nb = static_cast<int32_t>(m / in.bs) + 1;
    in.err = gpu_->alloc({1}, DType::kI32);
    gpu_->fill_zero(in.err);
    return in;
  }
  // A backend attention_input call (qb, cb) against the reference (qa, ca): the rows and
  // both caches within rounding.
  void check_rotary_call(const std::string& what, const Tensor& qb, const LayerKvCache& cb,
                         const Tensor& qa, const LayerKvCache& ca) {
    expect_near(host_values(*gpu_, qb), host_values(*gpu_, qa), bound_for(dt_), tag(what));
    expect_near(host_values(*gpu_, cb.k), host_values(*gpu_, ca.k), bound_for(dt_),
                tag(what + " k cache"));
    expect_near(host_values(*gpu_, cb.v), host_values(*gpu_, ca.v), bound_for(dt_),
                tag(what + " v cache"));
  }
  // The gated SiLU MLP input of a stacked [gate | up] weight.
  static MlpInput gated_input(const Tensor& w) {
    return MlpInput{true, Activation::kSilu, LinearWeights{w, Tensor()}, {}, {}};
  }
  // The attention input of a stacked qkv weight, rotated in `style`.
  static AttentionInput qkv_input(const QkvLayout& layout, const Tensor& w, const Tensor& bias,
                                  RotaryStyle style) {
    AttentionInput in;
    in.layout = layout;
    in.qkv = LinearWeights{w, bias};
    in.rotary = style;
    return in;
  }
  // An RMS norm over k folded away (a weight of ones), as prepare_input_norm leaves it.
  NormParams folded_norm(int64_t k, float eps) {
    NormParams norm;
    norm.eps = eps;
    Tensor ones = Tensor::empty({k}, DType::kF32);
    std::fill(ones.data<float>(), ones.data<float>() + k, 1.f);
    norm.weight = dev_f32(ones);
    norm.folded = true;
    return norm;
  }
  // start + x · wᵀ (+ bias), the CPU's product added in double: what linear_residual
  // gives.
  std::vector<double> added(const Tensor& x, const Tensor& w, const Tensor& bias,
                            const Tensor& start) {
    Tensor prod = Tensor::zeros({x.dim(0), w.dim(0)}, DType::kF32);
    cpu_->linear(x, w, bias, prod, 0, Activation::kIdentity);
    std::vector<double> want = host_values(prod);
    const std::vector<double> base = host_values(start);
    for (size_t i = 0; i < want.size(); ++i) want[i] += base[i];
    return want;
  }

  DType dt_ = DType::kBF16;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::unique_ptr<Backend> cpu_;
  std::mt19937 rng_;
};

}  // namespace tachyon::cuda_test
