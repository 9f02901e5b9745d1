// The wgmma GEMM against cuBLASLt, plain, gated and with its epilogues (--only wgmma,
// --only epilogue).
#include "kernel_bench.h"

namespace tachyon::bench {

// The wgmma GEMM (gemm_wgmma.cu) against cuBLASLt at the layer's products: plain for
// each product, and for gate_up the gated form against cuBLASLt's product followed by
// the gated activation; the wgmma GEMM with the epilogue in the consumers and handed
// off, each with its error against cuBLASLt's output. Weights rotated as in gemm_rates.
void wgmma_rates(const Dims& d, const std::vector<int64_t>& ms, int reps) {
  CudaBackendOptions o;
  cuda::CudaBackend be(o);
  constexpr size_t kWorkspace = size_t{32} << 20;
  Tensor workspace = be.allocator().alloc_bytes(kWorkspace);
  cuda::Gemm lt(be.stream(), workspace.raw(), kWorkspace);
  if (!cuda::gemm_wgmma_active(DType::kBF16)) {
    std::printf("\nwgmma GEMM: not active on this device\n");
    return;
  }
  const Shape5 shapes[] = {{"qkv", (d.heads + 2 * d.kv_heads) * d.head_dim, d.hidden},
                           {"o", d.hidden, d.heads * d.head_dim},
                           {"gate_up", 2 * d.inter, d.hidden},
                           {"down", d.hidden, d.inter}};
  std::printf("\n%-8s %6s %7s %6s %-16s %10s %9s %9s\n", "wgmma", "m", "n", "k", "variant", "us",
              "TFLOP/s", "rel.err");
  for (const Shape5& s : shapes) {
    const double wbytes = 2.0 * s.n * s.k;
    const int copies = static_cast<int>(std::clamp<double>(std::ceil(256e6 / wbytes), 1, 16));
    std::vector<Tensor> w;
    for (int c = 0; c < copies; ++c) w.push_back(upload_random(be, {s.n, s.k}, 100 + c));
    for (int64_t m : ms) {
      Tensor x = upload_random(be, {m, s.k}, 7 + m);
      Tensor y = be.alloc({m, s.n}, DType::kBF16);
      const double flops = 2.0 * m * s.n * s.k;
      auto report = [&](const std::string& variant, double t, double err) {
        std::printf("%-8s %6lld %7lld %6lld %-16s %10.2f %9.1f %9.2e\n", s.name,
                    static_cast<long long>(m), static_cast<long long>(s.n),
                    static_cast<long long>(s.k), variant.c_str(), t * 1e6, flops / t / 1e12, err);
        std::printf("RESULT wgmma_%s_m%lld_%s_us %.2f tflops %.1f err %.2e\n", s.name,
                    static_cast<long long>(m), variant.c_str(), t * 1e6, flops / t / 1e12, err);
      };
      lt_product(lt, x, w[0], y);
      const std::vector<float> ref = bench::bf16_values(be, y);
      report("cublas", time_calls(be, reps, [&](int i) { lt_product(lt, x, w[i % copies], y); }),
             0.0);
      // Each configuration into out (n_out columns; up_row >= 0: gated), against ref.
      auto configs = [&](const char* prefix, Tensor& out, int64_t up_row, cuda::KAct act,
                         const std::vector<float>& want) {
        cuda::WgmmaGemmArgs g;
        g.x = x.raw();
        g.type = DType::kBF16;
        g.m = m;
        g.k = s.k;
        g.w_rows = s.n;
        g.y = out.raw();
        g.n_out = out.dim(1);
        g.ldy = out.dim(1);
        g.up_row = up_row;
        g.act = act;
        for (const bool handoff : {false, true}) {
          g.handoff = handoff;
          be.fill_zero(out);
          g.w = w[0].raw();
          if (!cuda::launch_gemm_wgmma(g, be.stream())) raise<Internal>("wgmma GEMM declined");
          const double err = bench::rel_error(bench::bf16_values(be, out), want);
          const double t = time_calls(be, reps, [&](int i) {
            g.w = w[i % copies].raw();
            cuda::launch_gemm_wgmma(g, be.stream());
          });
          report(std::string(prefix) + (handoff ? "hand" : "consumers"), t, err);
        }
      };
      configs("", y, -1, cuda::KAct::kIdentity, ref);
      if (std::string(s.name) != "gate_up") continue;
      const int64_t inter = s.n / 2;
      Tensor a = be.alloc({m, inter}, DType::kBF16);
      lt_product(lt, x, w[0], y);
      be.gated_activation(y, Activation::kSilu, a);
      const std::vector<float> gref = bench::bf16_values(be, a);
      report("cublas+gated",
             time_calls(be, reps,
                        [&](int i) {
                          lt_product(lt, x, w[i % copies], y);
                          be.gated_activation(y, Activation::kSilu, a);
                        }),
             0.0);
      configs("gated_", a, inter, cuda::KAct::kSilu, gref);
    }
  }
}

// The products whose epilogue the wgmma GEMM takes over from kEpilogueRows rows against
// what they replace: qkv with the rotary and the KV-cache write (through the backend,
// against cuBLASLt's product and then rotary_write_kv), o and down with the residual add
// (the kernel launched directly, also for the o product, which the backend leaves to
// cuBLASLt, against cuBLASLt's product with the residual as its C input); and qkv and
// gate_up normalising their rows themselves (a folded norm: the pass that computes the
// rows' scales, timed alone as row_scales, then the product scaling its rows) against the
// weightless norm's pass and then the same product. Each output's relative error
// against the replaced path's is printed beside its time (0 for the rows only timed).
void epilogue_rates(const Dims& d, const std::vector<int64_t>& ms, int reps) {
  CudaBackendOptions o;
  cuda::CudaBackend be(o);
  if (!cuda::gemm_wgmma_active(DType::kBF16)) return;
  constexpr size_t kWorkspace = size_t{32} << 20;
  Tensor workspace = be.allocator().alloc_bytes(kWorkspace);
  cuda::Gemm lt(be.stream(), workspace.raw(), kWorkspace);
  const QkvLayout layout{static_cast<int32_t>(d.heads), static_cast<int32_t>(d.kv_heads),
                         static_cast<int32_t>(d.head_dim)};
  // An RMS norm with a weight of ones (a norm whose weight was folded away).
  NormParams unit;
  {
    const std::vector<float> ones(static_cast<size_t>(d.hidden), 1.f);
    unit.weight = be.upload(ones.data(), {d.hidden}, DType::kF32, {});
    unit.eps = 1e-5f;
  }
  NormParams folded = unit;
  folded.folded = true;
  // The backend's fused products, checked to have run on the wgmma GEMM.
  auto wgmma_ran = [&](const char* what) {
    if (be.last_linear_path() != cuda::CudaBackend::LinearPath::kWgmma)
      raise<Internal>("{} did not run on the wgmma GEMM", what);
  };
  std::printf("\n%-8s %6s %-22s %10s %9s\n", "epilogue", "m", "variant", "us", "rel.err");
  auto report = [&](const char* name, int64_t m, const char* variant, double t, double err) {
    std::printf("%-8s %6lld %-22s %10.2f %9.2e\n", name, static_cast<long long>(m), variant,
                t * 1e6, err);
    std::printf("RESULT epilogue_%s_m%lld_%s_us %.2f err %.2e\n", name, static_cast<long long>(m),
                variant, t * 1e6, err);
  };
  // The plain product with the hand-off, for reference: what the epilogue adds to it.
  auto plain = [&](const Tensor& x, const Tensor& w, Tensor& y) {
    cuda::WgmmaGemmArgs g = cuda::wgmma_product(x.raw(), w.raw(), y.raw(), DType::kBF16, x.dim(0),
                                                w.dim(0), x.dim(1), y.dim(1));
    g.handoff = true;
    return time_calls(be, reps, [&](int) {
      if (!cuda::launch_gemm_wgmma(g, be.stream())) raise<Internal>("wgmma GEMM declined");
    });
  };
  for (int64_t m : ms) {
    if (m < cuda::CudaBackend::kEpilogueRows) continue;
    // qkv: rotary and cache write. Real angles (position t, frequency p), one slot a row.
    {
      const int64_t n = layout.row_cols(), k = d.hidden;
      const int rot = static_cast<int>(d.head_dim);
      Tensor x = upload_random(be, {m, k}, 21), w = upload_random(be, {n, k}, 22);
      std::vector<float> cs(static_cast<size_t>(m * rot));
      for (int64_t t = 0; t < m; ++t)
        for (int p = 0; p < rot / 2; ++p) {
          const double ang = static_cast<double>(t) * std::pow(500000.0, -2.0 * p / rot);
          cs[t * rot + p] = static_cast<float>(std::cos(ang));
          cs[t * rot + rot / 2 + p] = static_cast<float>(std::sin(ang));
        }
      Tensor cos_sin = be.upload(cs.data(), {m, rot}, DType::kF32, {});
      std::vector<int32_t> sl(static_cast<size_t>(m));
      for (int64_t t = 0; t < m; ++t) sl[t] = static_cast<int32_t>(t);
      Tensor slots = be.upload_i32(sl.data(), m);
      const int32_t bs = 16;
      const Shape cshape = {(m + bs - 1) / bs, layout.num_kv_heads, bs, layout.head_dim};
      LayerKvCache ca{be.alloc(cshape, DType::kBF16), be.alloc(cshape, DType::kBF16)};
      LayerKvCache cb{be.alloc(cshape, DType::kBF16), be.alloc(cshape, DType::kBF16)};
      Tensor qa = be.alloc({m, n}, DType::kBF16), qb = be.alloc({m, n}, DType::kBF16);
      auto apart = [&] {
        lt_product(lt, x, w, qa);
        be.rotary_write_kv(qa, layout, cos_sin, RotaryStyle::kHalf, rot, slots, ca);
      };
      AttentionInput qkv_in;
      qkv_in.layout = layout;
      qkv_in.qkv = LinearWeights{w, Tensor()};
      qkv_in.rotary = RotaryStyle::kHalf;
      auto fused = [&] {
        be.attention_input(x, nullptr, qkv_in, cos_sin, Tensor(), slots, cb, qb, nullptr);
        wgmma_ran("attention_input");
      };
      apart();
      fused();
      const double err = bench::rel_error(bench::bf16_values(be, qb), bench::bf16_values(be, qa));
      const double err_k =
          bench::rel_error(bench::bf16_values(be, cb.k), bench::bf16_values(be, ca.k));
      report("qkv", m, "cublas+rotary_kv", time_calls(be, reps, [&](int) { apart(); }), 0.0);
      report("qkv", m, "wgmma_rotary_kv", time_calls(be, reps, [&](int) { fused(); }),
             std::max(err, err_k));
      report("qkv", m, "wgmma_plain", plain(x, w, qb), 0.0);
      // From the residual stream: the weightless norm's pass and then the product, against
      // the product normalising the rows itself (the norm's weight folded away).
      // product(in, norm) runs it; out is what it writes.
      Tensor h = be.alloc({m, k}, DType::kBF16);
      {
        Tensor scales = be.alloc({m}, DType::kF32);
        report("norm", m, "row_scales",
               time_calls(be, reps,
                          [&](int) {
                            cuda::launch_row_inv_rms(x.raw(), DType::kBF16, m, k, folded.eps,
                                                     scales.data<float>(), be.stream());
                          }),
               0.0);
        report("norm", m, "add_norm",
               time_calls(be, reps,
                          [&](int) {
                            Tensor xr = x;
                            be.add_norm(xr, Tensor(), Tensor(), unit, h);
                          }),
               0.0);
      }
      auto rms_rates = [&](const char* name, auto&& product, const Tensor& out) {
        auto apart_rms = [&] {
          Tensor xr = x;
          be.add_norm(xr, Tensor(), Tensor(), unit, h);
          product(h, nullptr);
        };
        apart_rms();
        const std::vector<float> ref = bench::bf16_values(be, out);
        product(x, &folded);
        const double e = bench::rel_error(bench::bf16_values(be, out), ref);
        report(name, m, "norm+wgmma", time_calls(be, reps, [&](int) { apart_rms(); }), 0.0);
        report(name, m, "wgmma", time_calls(be, reps, [&](int) { product(h, nullptr); }), 0.0);
        report(name, m, "wgmma_rms", time_calls(be, reps, [&](int) { product(x, &folded); }), e);
      };
      rms_rates(
          "qkv",
          [&](const Tensor& in, const NormParams* norm) {
            be.attention_input(in, norm, qkv_in, cos_sin, Tensor(), slots, cb, qb, nullptr);
            wgmma_ran("attention_input");
          },
          qb);
      Tensor wg = upload_random(be, {2 * d.inter, k}, 23), a = be.alloc({m, d.inter}, DType::kBF16);
      rms_rates(
          "gate_up",
          [&](const Tensor& in, const NormParams* norm) {
            be.mlp_input(in, norm, MlpInput{true, Activation::kSilu, {wg, Tensor()}, {}, {}}, a,
                         nullptr);
            wgmma_ran("mlp_input");
          },
          a);
    }
    // o and down: the residual add. The residual grows over the timed calls (not zeros).
    for (const Shape5 s :
         {Shape5{"o", d.hidden, d.heads * d.head_dim}, Shape5{"down", d.hidden, d.inter}}) {
      Tensor x = upload_random(be, {m, s.k}, 31), w = upload_random(be, {s.n, s.k}, 32);
      Tensor ya = upload_random(be, {m, s.n}, 33), yb = upload_random(be, {m, s.n}, 33);
      const int parts = cuda::gemm_wgmma_square_parts(s.n);
      Tensor squares = be.alloc({parts, m}, DType::kF32);
      // keep: the rows' squares too (for the next product's row scales).
      auto add = [&](bool wgmma, Tensor& y, bool keep = false) {
        if (!wgmma) {
          cuda::GemmArgs g;
          g.m = m;
          g.n = s.n;
          g.k = s.k;
          g.x = x.raw();
          g.w = w.raw();
          g.y = y.raw();
          g.ldy = s.n;
          g.accumulate = true;
          lt.run(g);
          return;
        }
        cuda::WgmmaGemmArgs g =
            cuda::wgmma_product(x.raw(), w.raw(), y.raw(), DType::kBF16, m, s.n, s.k, s.n);
        g.handoff = true;
        g.add = true;
        if (keep) g.row_squares = squares.data<float>();
        if (!cuda::launch_gemm_wgmma(g, be.stream())) raise<Internal>("wgmma add declined");
      };
      add(false, ya);
      add(true, yb);
      const double err = bench::rel_error(bench::bf16_values(be, yb), bench::bf16_values(be, ya));
      report(s.name, m, "cublas_add", time_calls(be, reps, [&](int) { add(false, ya); }), 0.0);
      report(s.name, m, "wgmma_add", time_calls(be, reps, [&](int) { add(true, yb); }), err);
      // Keeping the rows' squares for the next product's row scales (the folded norms), and
      // turning them into the scales.
      report(s.name, m, "wgmma_add_squares",
             time_calls(be, reps, [&](int) { add(true, yb, true); }), 0.0);
      {
        std::vector<float> h(static_cast<size_t>(parts * m));
        for (size_t i = 0; i < h.size(); ++i) h[i] = 1.f + static_cast<float>(i % 97);
        Tensor sq = be.upload(h.data(), {parts, m}, DType::kF32, {});
        Tensor scales = be.alloc({m}, DType::kF32);
        report(s.name, m, "row_scales_parts",
               time_calls(be, reps,
                          [&](int) {
                            cuda::launch_row_inv_rms_parts(sq.data<float>(), parts, m, s.n, 1e-5f,
                                                           scales.data<float>(), be.stream());
                          }),
               0.0);
      }
      report(s.name, m, "wgmma_plain", plain(x, w, yb), 0.0);
    }
  }
}

}  // namespace tachyon::bench
