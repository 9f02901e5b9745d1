// Norms folded into the products that read them: prepare_input_norm, the row scales of
// the wgmma GEMM and the squares its add keeps.
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

class CudaFoldedNormTest : public CudaOpsTest {};

// Norms folded into the products that read them:
// - prepare_input_norm: w' = w * (offset + g), rounded, bit for bit against the host's
//   f32 product rounded, offsets 0 and 1 (Gemma's norms); the source weight untouched,
//   the norm left folded (a weight of ones); nothing for a LayerNorm, a norm with a bias,
//   a width mismatch, or a norm folded already.
// - launch_row_inv_rms: 1 / sqrt(mean(x²) + eps) of rows whose scales span 1e-2 .. 1e2,
//   in 16-byte pieces (widths of whole pieces, one batch and several, a batch that ends
//   mid-row) and one element at a time (a width that rules pieces out, and a view that
//   starts mid-piece), against the host's sums in double.
// - mlp_input and attention_input with a folded norm (the wgmma GEMM scaling its rows by
//   those factors, from kEpilogueRows rows on Hopper): rows whose scales span 1e-2 ..
//   1e2 (the normalisation matters), eps 1e-5 and 0.1 (eps matters), k not a multiple of
//   64 and rows past the last tile. Gated: against the host's product of x scaled by
//   1 / sqrt(mean(x²) + eps) in double, gate and up rounded, the activation rounded, the
//   product. Rotary: against linear() and rotary_write_kv() on the rows normalised by
//   add_norm with a weight of ones (within rounding), both caches included. Below
//   kEpilogueRows, and with a NaN eps, the norm's own pass runs (no row scales); the
//   kernel refuses row scales without the hand-off, for a plain product, misaligned.
// - The add's kept squares (Hopper): the wgmma GEMM's add writing each row's sum of
//   squares per 256-column tile (two whole tiles and one of a single piece) against the
//   host's sums over the y it wrote, launch_row_inv_rms_parts against the host's scales;
//   the kernel refuses squares without the add or misaligned. Through the backend: the
//   squares linear_residual kept serve the folded norm of the product that reads those
//   rows next (one parts launch, the same outputs as the pass within rounding); other
//   rows, rows another linear_residual replaced them with, rows any op wrote since, and
//   cuBLASLt's add (which keeps nothing) take the pass.
TEST_P(CudaFoldedNormTest, FoldedNorms) {
  // ---- prepare_input_norm ----
  {
    const int64_t n = 37, k = 72;
    Tensor w = input({n, k});
    Tensor g = randn({k}, rng_, 0.3f, 1.f);
    const Tensor wd = gpu_->prepare_weight(w);
    for (float offset : {0.f, 1.f}) {
      NormParams norm;
      norm.weight = dev_f32(g);
      norm.weight_offset = offset;
      Tensor want = Tensor::empty({n, k}, DType::kF32);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c)
          want.data<float>()[r * k + c] =
              w.data<float>()[r * k + c] * (offset + g.data<float>()[c]);
      Tensor reader = wd;
      Tensor* readers[] = {&reader};
      gpu_->prepare_input_norm(norm, readers);
      ASSERT_TRUE(norm.folded);
      ASSERT_NE(reader.raw(), wd.raw());
      expect_near(host_values(*gpu_, reader), host_values(rounded(want, dt_)), 0.0,
                  tag("folded weight, offset " + std::to_string(static_cast<int>(offset))));
      EXPECT_EQ(norm.weight_offset, 0.f);
      for (double v : host_values(*gpu_, norm.weight)) ASSERT_EQ(v, 1.0);
      // Folded already: nothing more.
      Tensor again = reader;
      Tensor* more[] = {&again};
      gpu_->prepare_input_norm(norm, more);
      EXPECT_EQ(again.raw(), reader.raw());
    }
    expect_near(host_values(*gpu_, wd), host_values(w), 0.0, tag("folded source untouched"));
    const auto kept = [&](NormParams norm, Tensor reader) {
      Tensor* readers[] = {&reader};
      const void* before = reader.raw();
      gpu_->prepare_input_norm(norm, readers);
      return !norm.folded && reader.raw() == before;
    };
    NormParams norm;
    norm.weight = dev_f32(g);
    NormParams layer = norm;
    layer.type = NormType::kLayerNorm;
    EXPECT_TRUE(kept(layer, wd)) << "a LayerNorm";
    NormParams biased = norm;
    biased.bias = dev_f32(randn({k}, rng_));
    EXPECT_TRUE(kept(biased, wd)) << "a norm with a bias";
    EXPECT_TRUE(kept(norm, gpu_->prepare_weight(input({n, k + 8})))) << "another width";
  }
  const bool active = cuda::gemm_wgmma_active(dt_);
  // Rows of random scales, and each row's 1 / sqrt(mean(x²) + eps).
  const auto scaled_rows = [&](int64_t m, int64_t k) {
    Tensor x = randn({m, k}, rng_);
    std::uniform_real_distribution<float> e(-2.f, 2.f);
    for (int64_t r = 0; r < m; ++r) {
      const float s = std::pow(10.f, e(rng_));
      for (int64_t c = 0; c < k; ++c) x.data<float>()[r * k + c] *= s;
    }
    return rounded(x, dt_);
  };
  const auto inv_rms = [](const Tensor& x, float eps) {
    const int64_t m = x.dim(0), k = x.dim(1);
    std::vector<double> inv(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < k; ++c)
        ss += double{x.data<float>()[r * k + c]} * x.data<float>()[r * k + c];
      inv[r] = 1.0 / std::sqrt(ss / static_cast<double>(k) + eps);
    }
    return inv;
  };
  // ---- row scales ----
  for (const auto& [m, k, offset] : {std::tuple<int64_t, int64_t, int64_t>{300, 4096, 0},
                                     {77, 520, 0},
                                     {1000, 64, 0},
                                     {45, 37, 0},
                                     {45, 136, 3}}) {
    const std::string what = "row_inv_rms " + std::to_string(m) + "x" + std::to_string(k) + " at " +
                             std::to_string(offset);
    const float eps = 1e-5f;
    Tensor x = scaled_rows(m, k + offset);
    Tensor xd = dev(x);
    const void* at = static_cast<const char*>(xd.raw()) + offset * dtype_size(dt_);
    // m rows of k read from element `offset` of the buffer on (offset 3: a view that
    // starts mid-piece); the host reads the same elements.
    Tensor got = poisoned(*gpu_, {m}, DType::kF32);
    cuda::launch_row_inv_rms(at, dt_, m, k, eps, got.data<float>(), gpu_->stream());
    std::vector<double> want(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double v = x.data<float>()[offset + r * k + c];
        ss += v * v;
      }
      want[r] = 1.0 / std::sqrt(ss / static_cast<double>(k) + eps);
    }
    expect_near(host_values(*gpu_, got), want, 1e-5, tag(what));
  }
  // ---- gated ----
  struct GatedCase {
    int64_t m, n, k;
    float eps;
  };
  const GatedCase gated_cases[] = {
      {2100, 264, 136, 1e-5f}, {2300, 128, 520, 0.1f}, {1000, 128, 136, 1e-5f}};
  for (const GatedCase& c : gated_cases) {
    const std::string shape = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                              std::to_string(c.k) + " eps " + std::to_string(c.eps);
    Tensor x = scaled_rows(c.m, c.k);
    Tensor w = input({2 * c.n, c.k}, 1.f / std::sqrt(static_cast<float>(c.k)));
    Tensor prod = Tensor::zeros({c.m, 2 * c.n}, DType::kF32);
    cpu_->linear(x, w, Tensor(), prod, 0, Activation::kIdentity);
    const std::vector<double> inv = inv_rms(x, c.eps);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = 0; i < 2 * c.n; ++i)
        prod.data<float>()[r * 2 * c.n + i] =
            static_cast<float>(prod.data<float>()[r * 2 * c.n + i] * inv[r]);
    Tensor pr = rounded(prod, dt_);
    Tensor act = Tensor::zeros({c.m, c.n}, DType::kF32);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = 0; i < c.n; ++i) {
        const double v = pr.data<float>()[r * 2 * c.n + i];
        act.data<float>()[r * c.n + i] = static_cast<float>(v / (1.0 + std::exp(-v)));
      }
    Tensor act_r = rounded(act, dt_);
    std::vector<double> want(static_cast<size_t>(c.m * c.n));
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = 0; i < c.n; ++i)
        want[r * c.n + i] =
            double{act_r.data<float>()[r * c.n + i]} * pr.data<float>()[r * 2 * c.n + c.n + i];
    Tensor xd = dev(x), wd = gpu_->prepare_weight(w);
    {
      const NormParams nan_eps = folded_norm(c.k, std::nanf(""));
      Tensor out = poisoned(*gpu_, {c.m, c.n}, dt_);
      const int64_t before = cuda::gemm_wgmma_rms_launches();
      gpu_->mlp_input(xd, &nan_eps, gated_input(wd), out, nullptr);
      EXPECT_EQ(cuda::gemm_wgmma_rms_launches() - before, 0) << "NaN eps " << shape;
    }
    const NormParams norm = folded_norm(c.k, c.eps);
    Tensor out = poisoned(*gpu_, {c.m, c.n}, dt_);
    const int64_t before = cuda::gemm_wgmma_rms_launches();
    gpu_->mlp_input(xd, &norm, gated_input(wd), out, nullptr);
    const bool took = active && c.m >= cuda::CudaBackend::kGatedHandoffRows;
    EXPECT_EQ(cuda::gemm_wgmma_rms_launches() - before, took ? 1 : 0) << shape;
    expect_near(host_values(*gpu_, out), want, took ? bound_for(dt_) : 2 * bound_for(dt_),
                tag("mlp_input folded norm " + shape));
    if (!active) continue;
    cuda::WgmmaGemmArgs g =
        cuda::wgmma_product(xd.raw(), wd.raw(), out.raw(), dt_, c.m, c.n, c.k, c.n);
    g.w_rows = 2 * c.n;
    g.up_row = c.n;
    g.act = cuda::KAct::kSilu;
    g.handoff = true;
    Tensor scales = gpu_->alloc({c.m + 1}, DType::kF32);
    g.row_scale = scales.data<float>();
    ASSERT_TRUE(cuda::gemm_wgmma_supports(g)) << shape;
    for (int refuse = 1; refuse < 4; ++refuse) {
      cuda::WgmmaGemmArgs b = g;
      if (refuse == 1) b.handoff = false;
      if (refuse == 2) {
        b.up_row = -1;  // plain
        b.w_rows = b.n_out = 2 * c.n;
        b.ldy = 2 * c.n;
      }
      if (refuse == 3)
        b.row_scale =
            reinterpret_cast<const float*>(reinterpret_cast<const char*>(scales.data<float>()) + 2);
      EXPECT_FALSE(cuda::launch_gemm_wgmma(b, gpu_->stream())) << shape << " refusal " << refuse;
    }
  }
  // ---- squares kept by the add ----
  if (active) {
    const int64_t m = 2100, n = 520, k = 136, ng = 128;
    const float eps = 1e-5f;
    Tensor x = input({m, k});
    Tensor w = input({n, k}, 1.f / std::sqrt(static_cast<float>(k)));
    Tensor start = scaled_rows(m, n);
    Tensor xd = dev(x), wd = gpu_->prepare_weight(w);
    const int parts = cuda::gemm_wgmma_square_parts(n);
    ASSERT_EQ(parts, 3);
    Tensor y = dev(start);
    Tensor sq = poisoned(*gpu_, {parts, m}, DType::kF32);
    cuda::WgmmaGemmArgs g = cuda::wgmma_product(xd.raw(), wd.raw(), y.raw(), dt_, m, n, k, n);
    g.handoff = true;
    g.add = true;
    g.row_squares = sq.data<float>();
    ASSERT_TRUE(cuda::launch_gemm_wgmma(g, gpu_->stream()));
    const std::vector<double> yv = host_values(*gpu_, y);
    std::vector<double> want(static_cast<size_t>(parts * m), 0.0), inv(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) {
      double total = 0;
      for (int64_t c = 0; c < n; ++c) {
        const double v = yv[r * n + c];
        want[(c / 256) * m + r] += v * v;
        total += v * v;
      }
      inv[r] = 1.0 / std::sqrt(total / static_cast<double>(n) + eps);
    }
    expect_near(host_values(*gpu_, sq), want, 1e-5, tag("add's row squares"));
    Tensor scales = poisoned(*gpu_, {m}, DType::kF32);
    cuda::launch_row_inv_rms_parts(sq.data<float>(), parts, m, n, eps, scales.data<float>(),
                                   gpu_->stream());
    expect_near(host_values(*gpu_, scales), inv, 1e-5, tag("row_inv_rms_parts"));
    for (int refuse = 0; refuse < 2; ++refuse) {
      cuda::WgmmaGemmArgs b = g;
      if (refuse == 0) b.add = false;
      if (refuse == 1)
        b.row_squares = reinterpret_cast<float*>(reinterpret_cast<char*>(sq.data<float>()) + 2);
      EXPECT_FALSE(cuda::launch_gemm_wgmma(b, gpu_->stream())) << "squares refusal " << refuse;
    }
    // Through the backend: the residual stream after the add, read by the gated product.
    Tensor wg = gpu_->prepare_weight(input({2 * ng, n}, 1.f / std::sqrt(static_cast<float>(n))));
    const NormParams norm = folded_norm(n, eps);
    // The gated product of `in` and the parts launches it took.
    int64_t parts_launched = 0;
    const auto gated = [&](const Tensor& in) {
      Tensor out = poisoned(*gpu_, {m, ng}, dt_);
      const int64_t before = cuda::row_inv_rms_parts_launches();
      gpu_->mlp_input(in, &norm, gated_input(wg), out, nullptr);
      parts_launched = cuda::row_inv_rms_parts_launches() - before;
      return host_values(*gpu_, out);
    };
    // (The backend's add runs on the wgmma GEMM for products kDeepK deep.)
    const int64_t kd = cuda::CudaBackend::kDeepK;
    Tensor xdd = dev(input({m, kd}));
    const LinearWeights wdd{
        gpu_->prepare_weight(input({n, kd}, 1.f / std::sqrt(static_cast<float>(kd)))), Tensor()};
    Tensor res = dev(start), other = dev(start), copy = gpu_->alloc({m, n}, dt_);
    gpu_->linear_residual(xdd, wdd, res, nullptr);
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(copy.raw(), res.raw(), res.nbytes(),
                                       cudaMemcpyDeviceToDevice, gpu_->stream()));
    const std::vector<double> by_pass = gated(copy);
    EXPECT_EQ(parts_launched, 0) << "rows the add did not write";
    const std::vector<double> by_kept = gated(res);
    EXPECT_EQ(parts_launched, 1) << "the add's rows";
    expect_near(by_kept, by_pass, dt_ == DType::kBF16 ? 2e-3 : 5e-4,
                tag("gated from kept squares"));
    gated(other);
    EXPECT_EQ(parts_launched, 0) << "other rows";
    // Replaced by a later add's: the pass for the first rows, the second's serve.
    gpu_->linear_residual(xdd, wdd, other, nullptr);
    gated(res);
    EXPECT_EQ(parts_launched, 0) << "replaced";
    gated(other);
    EXPECT_EQ(parts_launched, 1) << "the later add's";
    // Written since: forgotten. A write elsewhere leaves them.
    gpu_->linear_residual(xdd, wdd, res, nullptr);
    gpu_->scale_add(copy, 1.f, copy, copy);
    gated(res);
    EXPECT_EQ(parts_launched, 1) << "a write elsewhere";
    gpu_->scale_add(res, 1.f, res, res);
    gated(res);
    EXPECT_EQ(parts_launched, 0) << "written since";
    // cuBLASLt's add (a shallow product) keeps nothing.
    gpu_->linear_residual(xd, LinearWeights{wd, Tensor()}, other, nullptr);
    gated(other);
    EXPECT_EQ(parts_launched, 0) << "cuBLASLt's add";
  }
  // ---- rotary and KV write ----
  for (int64_t m : {int64_t{2100}, int64_t{1000}}) {
    const QkvLayout layout{8, 2, 128};
    const int64_t cols = layout.row_cols(), k = 264;
    const int rot = 128;
    const float eps = 1e-5f;
    Tensor x = scaled_rows(m, k);
    Tensor w = input({cols, k}, 1.f / std::sqrt(static_cast<float>(k)));
    Tensor cs = rotary_table(m, rot);
    const int32_t bs = 16, nb = static_cast<int32_t>(m / bs) + 1;
    std::vector<int32_t> slots(static_cast<size_t>(m));
    for (int64_t t = 0; t < m; ++t) slots[t] = static_cast<int32_t>((t * 37 + 5) % m);
    Tensor init = input({nb, layout.num_kv_heads, bs, layout.head_dim});
    Tensor xd = dev(x), wd = gpu_->prepare_weight(w);
    Tensor cs_g = dev_f32(cs), slots_g = to_gpu_i32(*gpu_, slots);
    // The reference: the weightless norm's pass, the product, the rotary and cache write.
    NormParams unit;
    unit.eps = eps;
    Tensor ones = Tensor::empty({k}, DType::kF32);
    std::fill(ones.data<float>(), ones.data<float>() + k, 1.f);
    unit.weight = dev_f32(ones);
    Tensor xr = dev(x), h = poisoned(*gpu_, {m, k}, dt_);
    gpu_->add_norm(xr, Tensor(), Tensor(), unit, h);
    Tensor qa = poisoned(*gpu_, {m, cols}, dt_);
    LayerKvCache ca{dev(init), dev(init)};
    gpu_->linear(h, wd, Tensor(), qa, 0, Activation::kIdentity);
    gpu_->rotary_write_kv(qa, layout, cs_g, RotaryStyle::kHalf, rot, slots_g, ca);
    Tensor qb = poisoned(*gpu_, {m, cols}, dt_);
    LayerKvCache cb{dev(init), dev(init)};
    const NormParams norm = folded_norm(k, eps);
    const int64_t before = cuda::gemm_wgmma_rms_launches();
    gpu_->attention_input(xd, &norm, qkv_input(layout, wd, Tensor(), RotaryStyle::kHalf), cs_g,
                          Tensor(), slots_g, cb, qb, nullptr);
    const std::string what = "attention_input folded norm " + std::to_string(m);
    const bool fused = active && m >= cuda::CudaBackend::kEpilogueRows;
    EXPECT_EQ(cuda::gemm_wgmma_rms_launches() - before, fused ? 1 : 0) << what;
    check_rotary_call(what, qb, cb, qa, ca);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFoldedNormTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
