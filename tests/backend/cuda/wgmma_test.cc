// The wgmma GEMM (gemm_wgmma.cu) and its epilogues, plain and through the backend.
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

class CudaWgmmaTest : public CudaOpsTest {};

// The wgmma GEMM (gemm_wgmma.cu, Hopper only): plain products and the gated form (SiLU;
// GELU on odd widths) against the CPU's product, rounded and gated as the separate pass
// does, with and without the epilogue warps (hand-off); shapes with ragged row, column and k tiles
// (TMA's zero fill past the edges), and a row stride wider than the output, whose
// columns past it must stay untouched. The gated TMA store declines widths that end
// mid-piece. Through the backend, mlp_input takes it from kGatedMinRows rows (with the
// hand-off from kGatedHandoffRows) and runs cuBLASLt and the separate gate below, in
// f32, and where the kernel is not active.
TEST_P(CudaWgmmaTest, WgmmaGemm) {
  int major = 0, minor = 0;
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  const bool hopper = major == 9 && minor == 0;
  const bool active = dt_ != DType::kF32 && hopper;
  EXPECT_EQ(cuda::gemm_wgmma_active(dt_), active);
  const auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  const auto gelu_tanh = [](double v) {
    return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  };
  // The last from kGatedHandoffRows rows: the backend's call then takes the hand-off.
  const LinearCase cases[] = {{1, 64, 64},       {130, 200, 264},    {700, 384, 512},
                              {300, 203, 136},   {1029, 1000, 1032}, {256, 512, 4096},
                              {600, 2048, 1024}, {2100, 256, 136}};
  for (const LinearCase& c : cases) {
    // Odd widths take GELU (tanh) on the direct launches: the generic activation paths.
    const bool gelu = c.n % 2 == 1;
    Tensor x = input({c.m, c.k});
    Tensor w = input({2 * c.n, c.k}, 1.f / std::sqrt(static_cast<float>(c.k)));
    Tensor prod = Tensor::zeros({c.m, 2 * c.n}, DType::kF32);
    cpu_->linear(x, w, Tensor(), prod, 0, Activation::kIdentity);
    // The gated reference: gate and up rounded, the activation rounded, the product.
    Tensor pr = rounded(prod, dt_);
    Tensor act = Tensor::zeros({c.m, c.n}, DType::kF32);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = 0; i < c.n; ++i)
        act.data<float>()[r * c.n + i] =
            static_cast<float>(gelu ? gelu_tanh(pr.data<float>()[r * 2 * c.n + i])
                                    : silu(pr.data<float>()[r * 2 * c.n + i]));
    Tensor act_r = rounded(act, dt_);
    std::vector<double> gated(static_cast<size_t>(c.m * c.n));
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = 0; i < c.n; ++i)
        gated[r * c.n + i] = static_cast<double>(act_r.data<float>()[r * c.n + i]) *
                             pr.data<float>()[r * 2 * c.n + c.n + i];
    const std::vector<double> plain = host_values(prod);
    // Row strides: past the output, multiples of 8 (16-byte rows).
    const int64_t ld_g = (c.n + 15) / 8 * 8, ld_p = (2 * c.n + 7) / 8 * 8;
    const std::string shape =
        std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
    Tensor xd = dev(x), wd = gpu_->prepare_weight(w);
    if (active) {
      for (const bool handoff : {false, true}) {
        const std::string cfg = handoff ? " hand-off" : "";
        cuda::WgmmaGemmArgs g;
        g.x = xd.raw();
        g.w = wd.raw();
        g.type = dt_;
        g.m = c.m;
        g.k = c.k;
        g.w_rows = 2 * c.n;
        g.handoff = handoff;
        // Gated, into rows wider than the output (the columns past it stay poisoned).
        Tensor out = poisoned(*gpu_, {c.m, ld_g}, dt_);
        g.y = out.raw();
        g.n_out = c.n;
        g.up_row = c.n;
        g.act = gelu ? cuda::KAct::kGeluTanh : cuda::KAct::kSilu;
        g.ldy = ld_g + 2;  // the TMA store and the hand-off need 16-byte rows
        EXPECT_FALSE(cuda::launch_gemm_wgmma(g, gpu_->stream())) << shape << cfg;
        g.ldy = ld_g;
        // The TMA store needs outputs of whole 16-byte pieces; the hand-off does not.
        const bool takes = handoff || c.n % 8 == 0;
        ASSERT_EQ(cuda::launch_gemm_wgmma(g, gpu_->stream()), takes) << shape << cfg;
        const auto split = [&](const std::vector<double>& got, int64_t n, int64_t ld,
                               std::vector<double>& body, std::vector<double>& pad) {
          for (int64_t r = 0; r < c.m; ++r)
            for (int64_t i = 0; i < ld; ++i) (i < n ? body : pad).push_back(got[r * ld + i]);
        };
        std::vector<double> body, pad;
        split(host_values(*gpu_, out), c.n, ld_g, body, pad);
        if (takes) {
          expect_near(body, gated, bound_for(dt_), tag("wgmma gated " + shape + cfg));
          for (double v : pad) ASSERT_TRUE(std::isnan(v)) << "wrote past the output " << shape;
        } else {
          for (double v : body) ASSERT_TRUE(std::isnan(v)) << "declined but wrote " << shape;
        }
        // Plain, all 2n columns.
        Tensor y = poisoned(*gpu_, {c.m, ld_p}, dt_);
        g.y = y.raw();
        g.n_out = 2 * c.n;
        g.ldy = ld_p;
        g.up_row = -1;
        g.act = cuda::KAct::kIdentity;
        ASSERT_TRUE(cuda::launch_gemm_wgmma(g, gpu_->stream())) << shape << cfg;
        std::vector<double> pbody, ppad;
        split(host_values(*gpu_, y), 2 * c.n, ld_p, pbody, ppad);
        expect_near(pbody, plain, bound_for(dt_), tag("wgmma plain " + shape + cfg));
        for (double v : ppad) ASSERT_TRUE(std::isnan(v)) << "wrote past the output " << shape;
      }
    }
    // Through the backend (SiLU).
    if (gelu) continue;
    Tensor out = poisoned(*gpu_, {c.m, c.n}, dt_);
    gpu_->mlp_input(xd, nullptr, gated_input(wd), out, nullptr);
    const bool fused = active && c.m >= cuda::CudaBackend::kGatedMinRows && c.n % 8 == 0;
    EXPECT_EQ(gpu_->last_linear_path() == cuda::CudaBackend::LinearPath::kWgmma, fused) << shape;
    expect_near(host_values(*gpu_, out), gated, bound_for(dt_), tag("mlp_input " + shape));
  }
}

// The wgmma GEMM's other epilogues on the hand-off warps (Hopper only), each against the
// plain hand-off product followed by what it replaces, which must agree bit for bit (the
// same rounded product, the same roundings after it):
// - add: y += the product, against the product added to y's starting values in f32 and
//   rounded;
// - rotary: the qkv rows rotated and their k and v heads written into the paged caches,
//   against launch_rotary_write_kv on the plain product; both styles, partial rotary,
//   head_dim 64 and 128, 16-bit and e4m3 caches, skipped slots and a slot past the cache
//   (reported, not written).
// Through the backend, attention_input and (for products at least kDeepK deep)
// linear_residual take it from kEpilogueRows rows without bias (against cuBLASLt then the
// separate pass, within rounding) and otherwise run cuBLASLt and the separate pass.
TEST_P(CudaWgmmaTest, WgmmaEpilogues) {
  const bool active = cuda::gemm_wgmma_active(dt_);
  const auto plain_args = [&](const Tensor& x, const Tensor& w, Tensor& y) {
    cuda::WgmmaGemmArgs g =
        cuda::wgmma_product(x.raw(), w.raw(), y.raw(), dt_, x.dim(0), w.dim(0), x.dim(1), y.dim(1));
    g.handoff = true;
    return g;
  };
  // ---- add ----
  const LinearCase add_cases[] = {
      {300, 200, 264}, {130, 512, 136}, {2100, 256, 512}, {2100, 128, cuda::CudaBackend::kDeepK}};
  for (const LinearCase& c : add_cases) {
    const std::string shape =
        std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
    Tensor x = input({c.m, c.k});
    Tensor w = input({c.n, c.k}, 1.f / std::sqrt(static_cast<float>(c.k)));
    Tensor start = input({c.m, c.n}, 2.f);
    Tensor xd = dev(x), wd = gpu_->prepare_weight(w);
    if (active) {
      Tensor prod = poisoned(*gpu_, {c.m, c.n}, dt_);
      cuda::WgmmaGemmArgs g = plain_args(xd, wd, prod);
      ASSERT_TRUE(cuda::launch_gemm_wgmma(g, gpu_->stream())) << shape;
      const std::vector<double> p = host_values(*gpu_, prod), s0 = host_values(start);
      Tensor sum = Tensor::empty({c.m, c.n}, DType::kF32);
      for (size_t i = 0; i < p.size(); ++i)
        sum.data<float>()[i] = static_cast<float>(p[i]) + static_cast<float>(s0[i]);
      Tensor y = dev(start);
      g.y = y.raw();
      g.add = true;
      ASSERT_TRUE(cuda::launch_gemm_wgmma(g, gpu_->stream())) << shape;
      expect_near(host_values(*gpu_, y), host_values(rounded(sum, dt_)), 0.0,
                  tag("wgmma add " + shape));
    }
    // The backend: the wgmma GEMM from kEpilogueRows rows and kDeepK deep without bias,
    // else cuBLASLt.
    for (const bool with_bias : {false, true}) {
      Tensor b = rounded(randn({c.n}, rng_, 0.5f), dt_);
      const std::vector<double> want = added(x, w, with_bias ? b : Tensor(), start);
      Tensor y = dev(start);
      gpu_->linear_residual(xd, LinearWeights{wd, with_bias ? gpu_->prepare_weight(b) : Tensor()},
                            y, nullptr);
      const bool wgmma = active && !with_bias && c.m >= cuda::CudaBackend::kEpilogueRows &&
                         c.k >= cuda::CudaBackend::kDeepK;
      EXPECT_EQ(gpu_->last_linear_path() == cuda::CudaBackend::LinearPath::kWgmma, wgmma)
          << shape << (with_bias ? " bias" : "");
      expect_near(host_values(*gpu_, y), want, bound_for(dt_),
                  tag("linear_residual " + shape + (with_bias ? " bias" : "")));
    }
  }
  // ---- rotary and KV write ----
  struct RotCase {
    int64_t m;
    int heads, kv_heads, hd, rot;
    RotaryStyle style;
    bool fp8;
  };
  const RotCase rot_cases[] = {{300, 6, 2, 128, 128, RotaryStyle::kHalf, false},
                               {2100, 4, 2, 128, 128, RotaryStyle::kHalf, false},
                               {700, 8, 2, 64, 32, RotaryStyle::kInterleaved, false},
                               {515, 5, 1, 128, 64, RotaryStyle::kHalf, true},
                               {260, 6, 3, 64, 64, RotaryStyle::kInterleaved, true}};
  const int k = 264;
  for (const RotCase& c : rot_cases) {
    const QkvLayout layout{c.heads, c.kv_heads, c.hd};
    const int64_t cols = layout.row_cols();
    const std::string what = std::to_string(c.m) + " rows " + std::to_string(c.heads) + "/" +
                             std::to_string(c.kv_heads) + " heads hd " + std::to_string(c.hd) +
                             " rot " + std::to_string(c.rot) +
                             (c.style == RotaryStyle::kHalf ? " half" : " interleaved") +
                             (c.fp8 ? " e4m3 cache" : "");
    Tensor x = input({c.m, k});
    Tensor w = input({cols, k}, 1.f / std::sqrt(static_cast<float>(k)));
    Tensor cs = rotary_table(c.m, c.rot, 5);
    const int32_t bs = 16, nb = static_cast<int32_t>((c.m + bs - 1) / bs) + 2;
    std::vector<int32_t> slots(static_cast<size_t>(c.m));
    for (int64_t t = 0; t < c.m; ++t)
      slots[t] = static_cast<int32_t>((t * 37 + 11) % (int64_t{nb} * bs));
    slots[3] = -1;
    slots[c.m - 2] = nb * bs;  // past the cache: reported, skipped
    const Shape cshape = {nb, c.kv_heads, bs, c.hd};
    const DType cdt = c.fp8 ? DType::kF8E4M3 : dt_;
    Tensor xd = dev(x), wd = gpu_->prepare_weight(w), cs_g = dev_f32(cs),
           slots_g = to_gpu_i32(*gpu_, slots);
    if (!active) continue;
    cuda::WgmmaRotaryKv r;
    r.cos_sin = cs_g.data<float>();
    r.rot = c.rot;
    r.style = c.style == RotaryStyle::kHalf ? cuda::KRotary::kHalf : cuda::KRotary::kInterleaved;
    r.heads = c.heads;
    r.kv_heads = c.kv_heads;
    r.head_dim = c.hd;
    r.slots = slots_g.data<int32_t>();
    r.kv_fp8 = c.fp8;
    r.num_blocks = nb;
    r.block_size = bs;
    // Both runs start from the same poisoned caches and error words.
    auto run = [&](bool fused, Tensor& qkv, Tensor& kc, Tensor& vc, Tensor& err) {
      qkv = poisoned(*gpu_, {c.m, cols}, dt_);
      kc = gpu_->alloc(cshape, cdt);
      vc = gpu_->alloc(cshape, cdt);
      TACHYON_CUDA_CHECK(cudaMemsetAsync(kc.raw(), 0x5a, kc.nbytes(), gpu_->stream()));
      TACHYON_CUDA_CHECK(cudaMemsetAsync(vc.raw(), 0x3c, vc.nbytes(), gpu_->stream()));
      err = gpu_->alloc({1}, DType::kI32);
      gpu_->fill_zero(err);
      cuda::WgmmaRotaryKv rr = r;
      rr.k_cache = kc.raw();
      rr.v_cache = vc.raw();
      rr.err = err.data<int32_t>();
      cuda::WgmmaGemmArgs g = plain_args(xd, wd, qkv);
      if (fused) {
        g.rotary = &rr;
        return cuda::launch_gemm_wgmma(g, gpu_->stream());
      }
      if (!cuda::launch_gemm_wgmma(g, gpu_->stream())) return false;
      cuda::launch_rotary_write_kv(qkv.raw(), dt_, c.m, cols, c.heads, c.kv_heads, c.hd, rr.cos_sin,
                                   c.rot, rr.style, rr.slots, kc.raw(), vc.raw(), c.fp8, nb, bs,
                                   rr.err, gpu_->stream());
      return true;
    };
    Tensor qa, ka, va, ea, qb, kb, vb, eb;
    ASSERT_TRUE(run(false, qa, ka, va, ea)) << what;
    ASSERT_TRUE(run(true, qb, kb, vb, eb)) << what;
    expect_near(host_values(*gpu_, qb), host_values(*gpu_, qa), 0.0,
                tag("wgmma rotary qkv " + what));
    EXPECT_TRUE(device_bytes(kb) == device_bytes(ka)) << "k cache " << what;
    EXPECT_TRUE(device_bytes(vb) == device_bytes(va)) << "v cache " << what;
    const auto word = [&](const Tensor& e) {
      int32_t v = 0;
      const std::vector<uint8_t> b = device_bytes(e);
      std::memcpy(&v, b.data(), sizeof(v));
      return v;
    };
    EXPECT_EQ(word(eb), cuda::kErrKvSlot) << what;
    EXPECT_EQ(word(ea), cuda::kErrKvSlot) << what;
  }
  // The backend, on its own cache dtype, with valid slots: from kEpilogueRows rows the
  // fused pass (against cuBLASLt's product then rotary_write_kv, within rounding); below
  // them, or with a bias, cuBLASLt and the separate pass.
  for (int64_t m : {int64_t{1000}, int64_t{2100}}) {
    for (bool with_bias : {false, true}) {
      const QkvLayout layout{8, 2, 128};
      const int64_t cols = layout.row_cols();
      const int rot = 128;
      Tensor x = input({m, k});
      Tensor w = input({cols, k}, 1.f / std::sqrt(static_cast<float>(k)));
      Tensor b = rounded(randn({cols}, rng_, 0.5f), dt_);
      Tensor cs = rotary_table(m, rot);
      const int32_t bs = 16, nb = static_cast<int32_t>(m / bs) + 1;
      std::vector<int32_t> slots(static_cast<size_t>(m));
      for (int64_t t = 0; t < m; ++t) slots[t] = static_cast<int32_t>(t);
      Tensor init = input({nb, layout.num_kv_heads, bs, layout.head_dim});
      Tensor xd = dev(x), wd = gpu_->prepare_weight(w), bd = gpu_->prepare_weight(b);
      Tensor cs_g = dev_f32(cs), slots_g = to_gpu_i32(*gpu_, slots);
      const Tensor bias = with_bias ? bd : Tensor();
      Tensor qa = poisoned(*gpu_, {m, cols}, dt_);
      LayerKvCache ca{dev(init), dev(init)};
      gpu_->linear(xd, wd, bias, qa, 0, Activation::kIdentity);
      gpu_->rotary_write_kv(qa, layout, cs_g, RotaryStyle::kHalf, rot, slots_g, ca);
      Tensor qb = poisoned(*gpu_, {m, cols}, dt_);
      LayerKvCache cb{dev(init), dev(init)};
      gpu_->attention_input(xd, nullptr, qkv_input(layout, wd, bias, RotaryStyle::kHalf), cs_g,
                            Tensor(), slots_g, cb, qb, nullptr);
      const std::string what = "attention_input " + std::to_string(m) + (with_bias ? " bias" : "");
      const bool fused = active && !with_bias && m >= cuda::CudaBackend::kEpilogueRows;
      EXPECT_EQ(gpu_->last_linear_path() == cuda::CudaBackend::LinearPath::kWgmma, fused) << what;
      check_rotary_call(what, qb, cb, qa, ca);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaWgmmaTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
