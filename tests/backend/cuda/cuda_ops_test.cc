// Every CUDA op (but attention and MoE: their own files) against the CPU backend on the
// same dtype-rounded random inputs, in each compute dtype (bf16, f16, f32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/ops.h"
#include "backend/cuda/cuda_test_util.h"

namespace tachyon::cuda_test {
namespace {

// Rotary tables [m, rot] f32 of real angles: position pos0 + t, frequency p (base 10000),
// rot / 2 cosines then rot / 2 sines a row.
Tensor rotary_table(int64_t m, int rot, int64_t pos0 = 0) {
  Tensor cs = Tensor::empty({m, rot}, DType::kF32);
  for (int64_t t = 0; t < m; ++t)
    for (int p = 0; p < rot / 2; ++p) {
      const double ang = static_cast<double>(pos0 + t) * std::pow(10000.0, -2.0 * p / rot);
      cs.data<float>()[t * rot + p] = static_cast<float>(std::cos(ang));
      cs.data<float>()[t * rot + rot / 2 + p] = static_cast<float>(std::sin(ang));
    }
  return cs;
}

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

TEST_P(CudaOpsTest, Embedding) {
  for (auto [vocab, dim] : {std::pair<int64_t, int64_t>{1000, 96}, {37, 4099}}) {
    Tensor table = input({vocab, dim});
    std::vector<int32_t> ids(300);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab) - 3);
    for (auto& i : ids) i = pick(rng_);
    ids[0] = 0;
    ids[1] = static_cast<int32_t>(vocab) - 3;
    const int64_t n = static_cast<int64_t>(ids.size());
    for (bool accumulate : {false, true}) {
      Tensor base = input({n, dim});
      Tensor ref = base.clone();
      Tensor ids_h = Tensor::empty({n}, DType::kI32);
      std::copy(ids.begin(), ids.end(), ids_h.data<int32_t>());
      cpu_->embedding(table, ids_h, 2, 1.5f, accumulate, ref);
      Tensor out = accumulate ? dev(base) : poisoned(*gpu_, {n, dim}, dt_);
      gpu_->embedding(gpu_->prepare_weight(table), to_gpu_i32(*gpu_, ids), 2, 1.5f, accumulate,
                      out);
      expect_near(host_values(*gpu_, out), host_values(ref), bound_for(dt_),
                  tag("embedding " + std::to_string(dim) + (accumulate ? " +=" : "")));
    }
  }
  // f32 rows into an f32 output in every activation dtype (the decoder gathers its rotary
  // rows this way): the same bits.
  Tensor rows = randn({70, 128}, rng_);
  std::vector<int32_t> pos(513);
  std::uniform_int_distribution<int32_t> pick(0, 69);
  for (auto& p : pos) p = pick(rng_);
  const int64_t n = static_cast<int64_t>(pos.size());
  Tensor out = poisoned(*gpu_, {n, 128}, DType::kF32);
  gpu_->embedding(dev_f32(rows), to_gpu_i32(*gpu_, pos), 0, 1.f, false, out);
  Tensor want = Tensor::empty({n, 128}, DType::kF32);
  for (int64_t t = 0; t < n; ++t)
    std::copy_n(rows.data<float>() + int64_t{pos[t]} * 128, 128, want.data<float>() + t * 128);
  expect_near(host_values(*gpu_, out), host_values(want), 0.0, tag("embedding f32 rows"));
}

TEST_P(CudaOpsTest, AddNorm) {
  // 33 rows take the block-per-row kernels, 1100 the warp-per-row one (where the row
  // fits a warp's registers: d = 4096 in 16 bits with at most one delta, 64 and 1000).
  for (const auto& [n, d] : std::vector<std::pair<int64_t, int64_t>>{
           {33, 64}, {33, 1000}, {33, 4099}, {1100, 64}, {1100, 1000}, {1100, 4096}}) {
    for (NormType type : {NormType::kRMSNorm, NormType::kLayerNorm}) {
      for (int deltas = 0; deltas <= 2; ++deltas) {
        NormParams p;
        p.type = type;
        p.eps = 1e-5f;
        p.weight_offset = deltas == 1 ? 1.f : 0.f;
        Tensor w = randn({d}, rng_, 0.5f, 1.f);
        Tensor b = randn({d}, rng_, 0.2f);
        p.weight = w;
        if (type == NormType::kLayerNorm) p.bias = b;
        Tensor res = input({n, d}, 2.f, 0.5f), d1 = input({n, d}), d2 = input({n, d});
        Tensor res_ref = res.clone(), out_ref = Tensor::empty({n, d}, DType::kF32);
        cpu_->add_norm(res_ref, deltas > 0 ? d1 : Tensor(), deltas > 1 ? d2 : Tensor(), p, out_ref);
        NormParams pg = p;
        pg.weight = gpu_->prepare_weight(w);
        pg.bias = p.bias ? gpu_->prepare_weight(b) : Tensor();
        Tensor res_g = dev(res), out_g = poisoned(*gpu_, {n, d}, dt_);
        gpu_->add_norm(res_g, deltas > 0 ? dev(d1) : Tensor(), deltas > 1 ? dev(d2) : Tensor(), pg,
                       out_g);
        const std::string what = std::string(type == NormType::kRMSNorm ? "rms" : "layer") +
                                 "norm d=" + std::to_string(d) +
                                 " deltas=" + std::to_string(deltas);
        expect_near(host_values(*gpu_, out_g), host_values(out_ref), bound_for(dt_), tag(what));
        expect_near(host_values(*gpu_, res_g), host_values(res_ref), bound_for(dt_),
                    tag(what + " residual"));
        // In place: out aliases the residual.
        Tensor res_g2 = dev(res);
        gpu_->add_norm(res_g2, deltas > 0 ? dev(d1) : Tensor(), Tensor(), pg, res_g2);
        Tensor res_ref2 = res.clone();
        cpu_->add_norm(res_ref2, deltas > 0 ? d1 : Tensor(), Tensor(), p, res_ref2);
        expect_near(host_values(*gpu_, res_g2), host_values(res_ref2), bound_for(dt_),
                    tag(what + " in place"));
      }
    }
  }
}

TEST_P(CudaOpsTest, QkNorm) {
  for (int hd : {64, 80, 128, 256}) {
    const QkvLayout layout{6, 2, hd};
    const int64_t n = 17;
    Tensor qkv = input({n, layout.row_cols()}, 2.f, 0.3f);
    NormParams qn, kn;
    qn.weight = randn({hd}, rng_, 0.3f, 1.f);
    kn.weight = randn({hd}, rng_, 0.3f, 1.f);
    kn.eps = qn.eps = 1e-6f;
    Tensor ref = qkv.clone();
    cpu_->qk_norm(ref, layout, qn, kn);
    NormParams qg = qn, kg = kn;
    qg.weight = gpu_->prepare_weight(qn.weight);
    kg.weight = gpu_->prepare_weight(kn.weight);
    Tensor g = dev(qkv);
    gpu_->qk_norm(g, layout, qg, kg);
    expect_near(host_values(*gpu_, g), host_values(ref), bound_for(dt_),
                tag("qk_norm hd=" + std::to_string(hd)));
  }
}

struct LinearCase {
  int64_t m, n, k;
};

TEST_P(CudaOpsTest, Linear) {
  const LinearCase cases[] = {{1, 1, 1},
                              {1, 4096, 512},
                              {7, 33, 70},
                              {1000, 257, 96},
                              {64, 128, 64},
                              {5, 512, 4096},
                              {1025, 1000, 256},
                              // few rows: the matrix-vector kernel (k % 8 == 0)
                              {2, 129, 2056},
                              {3, 1000, 4104},
                              {4, 7, 64}};
  for (const LinearCase& c : cases) {
    for (Activation act : {Activation::kIdentity, Activation::kRelu, Activation::kSilu,
                           Activation::kGelu, Activation::kGeluTanh, Activation::kQuickGelu}) {
      for (bool with_bias : {false, true}) {
        if (act != Activation::kIdentity && c.m > 64) continue;  // keep the matrix of cases small
        Tensor x = input({c.m, c.k});
        Tensor w = input({c.n, c.k}, 1.f / std::sqrt(static_cast<float>(c.k)));
        // A 16-bit backend keeps biases, like weights, in its compute dtype (the GEMM
        // epilogue adds them in f32 from there).
        Tensor b = rounded(randn({c.n}, rng_, 0.5f), dt_);
        const int64_t off = c.n % 2 == 0 ? 8 : 3;
        const int64_t cols = c.n + off + 5;
        Tensor ref = Tensor::zeros({c.m, cols}, DType::kF32);
        cpu_->linear(x, w, with_bias ? b : Tensor(), ref, off, act);
        Tensor out = poisoned(*gpu_, {c.m, cols}, dt_);
        gpu_->linear(dev(x), gpu_->prepare_weight(w),
                     with_bias ? gpu_->prepare_weight(b) : Tensor(), out, off, act);
        // Compare the written columns only (the rest stays poisoned).
        std::vector<double> got = host_values(*gpu_, out), want = host_values(ref), g, wv;
        for (int64_t r = 0; r < c.m; ++r)
          for (int64_t j = off; j < off + c.n; ++j) {
            g.push_back(got[static_cast<size_t>(r * cols + j)]);
            wv.push_back(want[static_cast<size_t>(r * cols + j)]);
          }
        expect_near(g, wv, bound_for(dt_),
                    tag("linear " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                        std::to_string(c.k) + " act" + std::to_string(static_cast<int>(act)) +
                        (with_bias ? " bias" : "")));
      }
    }
  }
}

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
          out);
      if (dt_ != DType::kF32)
        EXPECT_EQ(gpu_->last_linear_path() == cuda::CudaBackend::LinearPath::kGemv,
                  c.m == 1 && !with_bias)
            << what;
      ASSERT_NE(host_values(*gpu_, out), base) << what;
      expect_near(host_values(*gpu_, out), want, bound_for(dt_), tag(what));
    }
  }
}

// The wgmma GEMM (gemm_wgmma.cu, Hopper only): plain products and the gated form (SiLU;
// GELU on odd widths) against the CPU's product, rounded and gated as the separate pass
// does, with and without the epilogue warps (hand-off); shapes with ragged row, column and k tiles
// (TMA's zero fill past the edges), and a row stride wider than the output, whose
// columns past it must stay untouched. The gated TMA store declines widths that end
// mid-piece. Through the backend, mlp_input takes it from kGatedMinRows rows (with the
// hand-off from kGatedHandoffRows) and runs cuBLASLt and the separate gate below, in
// f32, and where the kernel is not active.
TEST_P(CudaOpsTest, WgmmaGemm) {
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
    gpu_->mlp_input(xd, nullptr, gated_input(wd), out);
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
TEST_P(CudaOpsTest, WgmmaEpilogues) {
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
                            y);
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
                            Tensor(), slots_g, cb, qb);
      const std::string what = "attention_input " + std::to_string(m) + (with_bias ? " bias" : "");
      const bool fused = active && !with_bias && m >= cuda::CudaBackend::kEpilogueRows;
      EXPECT_EQ(gpu_->last_linear_path() == cuda::CudaBackend::LinearPath::kWgmma, fused) << what;
      check_rotary_call(what, qb, cb, qa, ca);
    }
  }
}

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
TEST_P(CudaOpsTest, FoldedNorms) {
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
      gpu_->mlp_input(xd, &nan_eps, gated_input(wd), out);
      EXPECT_EQ(cuda::gemm_wgmma_rms_launches() - before, 0) << "NaN eps " << shape;
    }
    const NormParams norm = folded_norm(c.k, c.eps);
    Tensor out = poisoned(*gpu_, {c.m, c.n}, dt_);
    const int64_t before = cuda::gemm_wgmma_rms_launches();
    gpu_->mlp_input(xd, &norm, gated_input(wd), out);
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
      gpu_->mlp_input(in, &norm, gated_input(wg), out);
      parts_launched = cuda::row_inv_rms_parts_launches() - before;
      return host_values(*gpu_, out);
    };
    // (The backend's add runs on the wgmma GEMM for products kDeepK deep.)
    const int64_t kd = cuda::CudaBackend::kDeepK;
    Tensor xdd = dev(input({m, kd}));
    const LinearWeights wdd{
        gpu_->prepare_weight(input({n, kd}, 1.f / std::sqrt(static_cast<float>(kd)))), Tensor()};
    Tensor res = dev(start), other = dev(start), copy = gpu_->alloc({m, n}, dt_);
    gpu_->linear_residual(xdd, wdd, res);
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
    gpu_->linear_residual(xdd, wdd, other);
    gated(res);
    EXPECT_EQ(parts_launched, 0) << "replaced";
    gated(other);
    EXPECT_EQ(parts_launched, 1) << "the later add's";
    // Written since: forgotten. A write elsewhere leaves them.
    gpu_->linear_residual(xdd, wdd, res);
    gpu_->scale_add(copy, 1.f, copy, copy);
    gated(res);
    EXPECT_EQ(parts_launched, 1) << "a write elsewhere";
    gpu_->scale_add(res, 1.f, res, res);
    gated(res);
    EXPECT_EQ(parts_launched, 0) << "written since";
    // cuBLASLt's add (a shallow product) keeps nothing.
    gpu_->linear_residual(xd, LinearWeights{wd, Tensor()}, other);
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
                          Tensor(), slots_g, cb, qb);
    const std::string what = "attention_input folded norm " + std::to_string(m);
    const bool fused = active && m >= cuda::CudaBackend::kEpilogueRows;
    EXPECT_EQ(cuda::gemm_wgmma_rms_launches() - before, fused ? 1 : 0) << what;
    check_rotary_call(what, qb, cb, qa, ca);
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

TEST_P(CudaOpsTest, LinearF32Logits) {
  // Logits: activation-dtype input, f32 output (with and without a bias).
  for (int64_t rows : {9, 1, 4})
    for (bool with_bias : {false, true}) {
      Tensor x = input({rows, 256});
      Tensor w = input({32000, 256}, 0.0625f);
      Tensor b = randn({32000}, rng_, 0.5f);
      Tensor ref = Tensor::empty({rows, 32000}, DType::kF32);
      cpu_->linear(x, w, with_bias ? b : Tensor(), ref, 0, Activation::kIdentity);
      Tensor out = poisoned(*gpu_, {rows, 32000}, DType::kF32);
      gpu_->linear(dev(x), gpu_->prepare_weight(w), with_bias ? gpu_->prepare_weight(b) : Tensor(),
                   out, 0, Activation::kIdentity);
      // f32 output of a 16-bit product: only accumulation order differs.
      expect_near(host_values(*gpu_, out), host_values(ref), dt_ == DType::kF32 ? 1e-5 : 1e-4,
                  tag(with_bias ? "logits f32 bias" : "logits f32"));
    }
}

TEST_P(CudaOpsTest, GatedAndElementwise) {
  const int64_t n = 37, inter = 1000;
  Tensor in = input({n, 2 * inter}, 2.f);
  for (Activation act : {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh,
                         Activation::kRelu, Activation::kQuickGelu}) {
    Tensor ref = Tensor::empty({n, inter}, DType::kF32);
    cpu_->gated_activation(in, act, ref);
    Tensor out = poisoned(*gpu_, {n, inter}, dt_);
    gpu_->gated_activation(dev(in), act, out);
    expect_near(host_values(*gpu_, out), host_values(ref), bound_for(dt_),
                tag("gated act" + std::to_string(static_cast<int>(act))));
    Tensor a = in.clone();
    cpu_->activation(a, act);
    Tensor ag = dev(in);
    gpu_->activation(ag, act);
    expect_near(host_values(*gpu_, ag), host_values(a), bound_for(dt_),
                tag("activation " + std::to_string(static_cast<int>(act))));
  }
  {
    // A width that is no multiple of the 16-byte vector: the element-wise path.
    Tensor odd = input({5, 2 * 1001}, 2.f);
    Tensor ref = Tensor::empty({5, 1001}, DType::kF32);
    cpu_->gated_activation(odd, Activation::kSilu, ref);
    Tensor out = poisoned(*gpu_, {5, 1001}, dt_);
    gpu_->gated_activation(dev(odd), Activation::kSilu, out);
    expect_near(host_values(*gpu_, out), host_values(ref), bound_for(dt_), tag("gated odd width"));
  }
  Tensor a = input({n, inter}), b = input({n, inter});
  Tensor sum = Tensor::empty({n, inter}, DType::kF32);
  cpu_->add(a, b, sum);
  Tensor sg = poisoned(*gpu_, {n, inter}, dt_);
  gpu_->add(dev(a), dev(b), sg);
  expect_near(host_values(*gpu_, sg), host_values(sum), bound_for(dt_), tag("add"));
  Tensor ssum = b.clone();
  cpu_->scale_add(a, 5.29f, ssum, ssum);
  Tensor ssg = dev(b);
  gpu_->scale_add(dev(a), 5.29f, ssg, ssg);
  expect_near(host_values(*gpu_, ssg), host_values(ssum), bound_for(dt_), tag("scale_add"));

  Tensor c = input({n, inter}, 30.f);
  Tensor cr = c.clone();
  cpu_->softcap(cr, 20.f);
  Tensor cg = dev(c);
  gpu_->softcap(cg, 20.f);
  expect_near(host_values(*gpu_, cg), host_values(cr), bound_for(dt_), tag("softcap"));
  Tensor cr2 = c.clone();
  cpu_->clamp(cr2, 25.f);
  Tensor cg2 = dev(c);
  gpu_->clamp(cg2, 25.f);
  expect_near(host_values(*gpu_, cg2), host_values(cr2), bound_for(dt_), tag("clamp"));

  std::vector<int32_t> rows = {36, 0, 5, 5, 17};
  Tensor rows_h = Tensor::empty({5}, DType::kI32);
  std::copy(rows.begin(), rows.end(), rows_h.data<int32_t>());
  Tensor gr = Tensor::empty({5, inter}, DType::kF32);
  cpu_->gather_rows(a, rows_h, gr);
  Tensor gg = poisoned(*gpu_, {5, inter}, dt_);
  gpu_->gather_rows(dev(a), to_gpu_i32(*gpu_, rows), gg);
  expect_near(host_values(*gpu_, gg), host_values(gr), bound_for(dt_), tag("gather_rows"));

  Tensor gate = input({n, 1}, 2.f);
  Tensor acc = b.clone();
  cpu_->add_sigmoid_gated(a, gate, acc);
  Tensor accg = dev(b);
  gpu_->add_sigmoid_gated(dev(a), dev(gate), accg);
  expect_near(host_values(*gpu_, accg), host_values(acc), bound_for(dt_), tag("add_sigmoid_gated"));
}

TEST_P(CudaOpsTest, Rotary) {
  for (RotaryStyle style : {RotaryStyle::kHalf, RotaryStyle::kInterleaved, RotaryStyle::kHalf2D}) {
    for (auto [hd, rot] : {std::pair<int, int>{64, 64}, {80, 32}, {128, 128}, {256, 64}}) {
      const QkvLayout layout{8, 2, hd};
      const int64_t n = 29;
      Tensor qkv = input({n, layout.row_cols()});
      Tensor cs = Tensor::empty({n, rot}, DType::kF32);
      for (int64_t t = 0; t < n; ++t)
        for (int p = 0; p < rot / 2; ++p) {
          const double ang = (t + 3) * std::pow(10000.0, -2.0 * p / rot);
          cs.data<float>()[t * rot + p] = static_cast<float>(std::cos(ang));
          cs.data<float>()[t * rot + rot / 2 + p] = static_cast<float>(std::sin(ang));
        }
      Tensor ref = qkv.clone();
      cpu_->rotary(ref, layout, cs, style, rot);
      Tensor g = dev(qkv);
      gpu_->rotary(g, layout, dev_f32(cs), style, rot);
      expect_near(host_values(*gpu_, g), host_values(ref), bound_for(dt_),
                  tag(std::string(style == RotaryStyle::kHalf          ? "rotary half"
                                  : style == RotaryStyle::kInterleaved ? "rotary interleaved"
                                                                       : "rotary half 2d") +
                      " hd=" + std::to_string(hd) + " rot=" + std::to_string(rot)));
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

TEST_P(CudaOpsTest, WriteKvAndCopyBlocks) {
  const QkvLayout layout{4, 2, 96};
  const int32_t nb = 7, bs = 5;
  const int64_t n = 12;
  Tensor qkv = input({n, layout.row_cols()});
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) slots[t] = static_cast<int32_t>((t * 3 + 2) % (nb * bs));
  slots[4] = -1;  // skipped
  const Shape cs = {nb, layout.num_kv_heads, bs, layout.head_dim};
  Tensor init = input(cs);
  LayerKvCache ref{init.clone(), init.clone()};
  Tensor slots_h = Tensor::empty({n}, DType::kI32);
  std::copy(slots.begin(), slots.end(), slots_h.data<int32_t>());
  cpu_->write_kv(qkv, layout, slots_h, ref);
  LayerKvCache g{dev(init), dev(init)};
  gpu_->write_kv(dev(qkv), layout, to_gpu_i32(*gpu_, slots), g);
  expect_near(host_values(*gpu_, g.k), host_values(ref.k), bound_for(dt_), tag("write_kv k"));
  expect_near(host_values(*gpu_, g.v), host_values(ref.v), bound_for(dt_), tag("write_kv v"));
  // A chain (block 1 is written and then read) runs pair by pair.
  const std::vector<std::pair<int32_t, int32_t>> pairs = {{0, 3}, {2, 5}, {3, 3}};
  const std::vector<std::pair<int32_t, int32_t>> chain = {{4, 1}, {1, 6}};
  for (const auto& p : {pairs, chain}) {
    cpu_->copy_blocks(ref.k, p);
    gpu_->copy_blocks(g.k, p);
  }
  expect_near(host_values(*gpu_, g.k), host_values(ref.k), bound_for(dt_), tag("copy_blocks"));
  EXPECT_THROW(gpu_->copy_blocks(g.k, {{0, nb}}), InvalidArgument);
}

// Blocks out to swap space (mapped host memory) and back, byte for byte; pageable host
// memory and blocks out of range are refused.
TEST_P(CudaOpsTest, SwapBlocksRoundTrip) {
  const int32_t nb = 7, ns = 4;
  const Shape cs = {nb, 2, 5, 96};
  Tensor cache = dev(input(cs));
  Tensor swap = gpu_->alloc_swap({ns, 2, 5, 96}, dt_);
  ASSERT_TRUE(swap.device().is_cpu());
  const std::vector<uint8_t> before = [&] {
    std::vector<uint8_t> b(cache.nbytes());
    gpu_->download(cache, b.data());
    return b;
  }();
  const size_t block = cache.nbytes() / nb;
  gpu_->copy_blocks_between(cache, swap, {{2, 0}, {5, 1}, {0, 3}});
  gpu_->synchronize();
  const auto* sw = static_cast<const uint8_t*>(swap.raw());
  for (auto [src, dst] : std::vector<std::pair<int, int>>{{2, 0}, {5, 1}, {0, 3}})
    EXPECT_EQ(std::memcmp(sw + dst * block, before.data() + src * block, block), 0)
        << tag("swap out block " + std::to_string(src));
  gpu_->fill_zero(cache);
  gpu_->copy_blocks_between(swap, cache, {{0, 6}, {1, 3}, {3, 0}});
  std::vector<uint8_t> after(cache.nbytes());
  gpu_->download(cache, after.data());
  std::vector<uint8_t> expect(cache.nbytes(), 0);
  for (auto [src, dst] : std::vector<std::pair<int, int>>{{2, 6}, {5, 3}, {0, 0}})
    std::memcpy(expect.data() + dst * block, before.data() + src * block, block);
  EXPECT_EQ(after, expect) << tag("swap in");
  Tensor pageable = Tensor::empty({ns, 2, 5, 96}, dt_);
  EXPECT_THROW(gpu_->copy_blocks_between(cache, pageable, {{0, 0}}), InvalidArgument);
  EXPECT_THROW(gpu_->copy_blocks_between(cache, swap, {{0, ns}}), InvalidArgument);
  EXPECT_THROW(gpu_->copy_blocks_between(swap, cache, {{-1, 0}}), InvalidArgument);
  Tensor other = gpu_->alloc_swap({ns, 2, 5, 64}, dt_);
  EXPECT_THROW(gpu_->copy_blocks_between(cache, other, {{0, 0}}), InvalidArgument);
}

TEST_P(CudaOpsTest, SamplingHelpers) {
  const int64_t rows = 5, vocab = 50257;
  Tensor logits = randn({rows, vocab}, rng_, 3.f);
  logits.data<float>()[2 * vocab + 777] = 40.f;  // a clear winner
  logits.data<float>()[3 * vocab + 5] = 50.f;    // a tie: lowest index wins
  logits.data<float>()[3 * vocab + 9] = 50.f;
  Tensor lg = dev_f32(logits);
  Tensor ids = poisoned(*gpu_, {rows}, DType::kI32);
  gpu_->argmax(lg, ids);
  Tensor ids_h = gpu_->to_host(ids);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data<float>() + r * vocab;
    EXPECT_EQ(ids_h.data<int32_t>()[r], std::max_element(row, row + vocab) - row) << "row " << r;
  }
  gpu_->log_softmax(lg);
  std::vector<double> want(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data<float>() + r * vocab;
    const double mx = *std::max_element(row, row + vocab);
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(row[j] - mx);
    for (int64_t j = 0; j < vocab; ++j)
      want[static_cast<size_t>(r * vocab + j)] = row[j] - mx - std::log(s);
  }
  expect_near(host_values(*gpu_, lg), want, 1e-5, "log_softmax f32");
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

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOpsTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
