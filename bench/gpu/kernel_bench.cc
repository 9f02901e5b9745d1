// Kernel-level rates on the GPU at a model's shapes, timed with CUDA events around
// back-to-back launches (what a recorded decode step sees), weights rotated over enough
// copies that they stream from memory rather than the L2, and every variant's relative
// error against another path's output printed beside its rate.
//
//   gemm: y[m, n] = x[m, k] w[n, k]^T for the model's five products (qkv, o, gate_up,
//         down, lm_head) at several m: the matrix-vector kernel for m <= 4, cuBLASLt with
//         tuned algorithm choice;
//   rows: add_norm and the gated activation at decode and prefill rows;
//   lt_algos (only when asked for): cuBLASLt's configurations for the layer's products
//         at prefill rows, timed briefly (as the tuner does) and under sustained load;
//   wgmma (only when asked for): the wgmma GEMM's configurations against cuBLASLt at the
//         layer's products, plain and (gate_up) gated; then (also alone, as epilogue)
//         the products with the rotary and KV write or the residual add in the
//         epilogue against what they replace.
//
// Usage: tachyon_kernel_bench [--config CONFIG.json] [--m 1,2,4,...]
//                             [--only gemm|rows|lt_algos|wgmma|epilogue]
//                             [--reps N]
// Lines starting with "RESULT" are for scripts.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "device_values.h"
#include "model_dims.h"

namespace tachyon {
namespace {

struct Shape5 {
  const char* name;
  int64_t n, k;
};

using Dims = bench::ModelDims;

// Fast deterministic pseudo-random bf16 values in about [-1, 1].
std::vector<uint16_t> random_bf16(int64_t n, uint64_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float f = static_cast<float>(static_cast<int32_t>(s >> 40) - (1 << 23)) / (1 << 23);
    x = f32_to_bf16(f).bits;
  }
  return v;
}

Tensor upload_random(cuda::CudaBackend& be, const Shape& shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const std::vector<uint16_t> h = random_bf16(n, seed);
  return be.upload(h.data(), shape, DType::kBF16, {});
}

// Median over 5 batches of the time per call of fn(i) for i = 0..calls-1 in a row.
template <typename Fn>
double time_calls(cuda::CudaBackend& be, int calls, Fn fn) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < calls; ++i) fn(i);  // warm-up (and tuning, the first time)
  std::vector<double> t;
  for (int b = 0; b < 5; ++b) {
    cudaEventRecord(e0, be.stream());
    for (int i = 0; i < calls; ++i) fn(i);
    cudaEventRecord(e1, be.stream());
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(ms * 1e-3 / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return bench::median(t);
}

// cuBLASLt's product y[m, n] = x[m, k] w[n, k]^T (bf16), what the wgmma GEMM replaces,
// on a Gemm of the bench's own (the backend runs it only where the wgmma GEMM does not).
void lt_product(cuda::Gemm& lt, const Tensor& x, const Tensor& w, Tensor& y) {
  cuda::GemmArgs g;
  g.m = x.dim(0);
  g.n = w.dim(0);
  g.k = x.dim(1);
  g.x = x.raw();
  g.w = w.raw();
  g.y = y.raw();
  g.ldy = y.dim(1);
  lt.run(g);
}

void gemm_rates(const Dims& d, const std::vector<int64_t>& ms, int reps) {
  // The backend's products at these rows (the matrix-vector kernel up to kGemvAutoRows,
  // cuBLASLt beyond), and cuBLASLt with tuned algorithm choice at every m (a Gemm of its
  // own on the backend's stream, the reference).
  CudaBackendOptions o;
  cuda::CudaBackend be(o);
  constexpr size_t kWorkspace = size_t{32} << 20;
  Tensor workspace = be.allocator().alloc_bytes(kWorkspace);
  cuda::Gemm lt(be.stream(), workspace.raw(), kWorkspace);
  const Shape5 shapes[] = {{"qkv", (d.heads + 2 * d.kv_heads) * d.head_dim, d.hidden},
                           {"o", d.hidden, d.heads * d.head_dim},
                           {"gate_up", 2 * d.inter, d.hidden},
                           {"down", d.hidden, d.inter},
                           {"lm_head", d.vocab, d.hidden}};
  std::printf("\n%-8s %6s %7s %6s %-12s %10s %9s %9s %9s\n", "gemm", "m", "n", "k", "variant", "us",
              "TB/s", "TFLOP/s", "rel.err");
  for (const Shape5& s : shapes) {
    const double wbytes = 2.0 * s.n * s.k;
    // Enough copies that one pass over them is 4x the L2 (at most 16).
    const int copies = static_cast<int>(std::clamp<double>(std::ceil(256e6 / wbytes), 1, 16));
    std::vector<Tensor> wt;
    for (int c = 0; c < copies; ++c) wt.push_back(upload_random(be, {s.n, s.k}, 100 + c));
    for (int64_t m : ms) {
      if (s.n == d.vocab && m > 256) continue;  // the lm_head runs on the last rows only
      Tensor xt = upload_random(be, {m, s.k}, 7 + m);
      Tensor yt = be.alloc({m, s.n}, DType::kBF16);
      auto lt_call = [&](int i) { lt_product(lt, xt, wt[i % copies], yt); };
      lt_call(0);
      const std::vector<float> ref = bench::bf16_values(be, yt);
      const double flops = 2.0 * m * s.n * s.k;
      const double bytes = wbytes + 2.0 * m * s.k + 2.0 * m * s.n;
      auto report = [&](const char* variant, double t, double err) {
        std::printf("%-8s %6lld %7lld %6lld %-12s %10.2f %9.2f %9.1f %9.2e\n", s.name,
                    static_cast<long long>(m), static_cast<long long>(s.n),
                    static_cast<long long>(s.k), variant, t * 1e6, bytes / t / 1e12,
                    flops / t / 1e12, err);
        std::printf("RESULT gemm_%s_m%lld_%s_us %.2f tbs %.3f tflops %.1f err %.2e\n", s.name,
                    static_cast<long long>(m), variant, t * 1e6, bytes / t / 1e12, flops / t / 1e12,
                    err);
      };
      if (m <= cuda::kGemvMaxRows) {
        auto call = [&](int i) {
          cuda::launch_gemv(xt.raw(), wt[i % copies].raw(), DType::kBF16, yt.raw(), DType::kBF16, m,
                            s.n, s.k, s.n, be.stream());
        };
        be.fill_zero(yt);
        call(0);
        const double err = bench::rel_error(bench::bf16_values(be, yt), ref);
        report("gemv", time_calls(be, reps, call), err);
      }
      report("lt_tuned", time_calls(be, reps, lt_call), 0.0);
    }
  }
}

void row_rates(const Dims& d, int reps) {
  CudaBackendOptions o;
  cuda::CudaBackend be(o);
  std::printf("\n%-22s %6s %10s %9s\n", "op", "rows", "us", "TB/s");
  auto report = [&](const char* op, int64_t rows, double t, double bytes) {
    std::printf("%-22s %6lld %10.2f %9.2f\n", op, static_cast<long long>(rows), t * 1e6,
                bytes / t / 1e12);
    std::printf("RESULT %s_r%lld_us %.2f tbs %.3f\n", op, static_cast<long long>(rows), t * 1e6,
                bytes / t / 1e12);
  };
  Tensor ones = Tensor::zeros({d.hidden}, DType::kF32);
  for (int64_t i = 0; i < d.hidden; ++i) ones.data<float>()[i] = 1.f;
  Tensor w = be.prepare_weight(ones);
  NormParams np;
  np.weight = w;
  np.type = NormType::kRMSNorm;
  np.eps = 1e-5f;
  for (int64_t rows : {1, 64, 1024, 8192}) {
    Tensor res = upload_random(be, {rows, d.hidden}, 1);
    Tensor delta = upload_random(be, {rows, d.hidden}, 2);
    Tensor out = be.alloc({rows, d.hidden}, DType::kBF16);
    const double t = time_calls(be, reps, [&](int) { be.add_norm(res, delta, Tensor(), np, out); });
    report("add_norm", rows, t, 2.0 * rows * d.hidden * 4);
    Tensor gu = upload_random(be, {rows, 2 * d.inter}, 3);
    Tensor a = be.alloc({rows, d.inter}, DType::kBF16);
    const double tg =
        time_calls(be, reps, [&](int) { be.gated_activation(gu, Activation::kSilu, a); });
    report("gated_silu", rows, tg, 2.0 * rows * d.inter * 3);
  }
}

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
// gate_up normalising their rows themselves (RowRms: the pass that computes the rows'
// scales, timed alone as row_scales, then the product scaling its rows) against the
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
      auto fused = [&] {
        if (!be.linear_rotary_kv(x, w, Tensor(), qb, layout, cos_sin, RotaryStyle::kHalf, rot,
                                 slots, cb))
          raise<Internal>("linear_rotary_kv declined");
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
      // the product normalising the rows itself (RowRms; the norm's weight folded away).
      // product(in, rms) runs it; out is what it writes.
      Tensor h = be.alloc({m, k}, DType::kBF16);
      const RowRms rms{1e-5f};
      {
        Tensor scales = be.alloc({m}, DType::kF32);
        report("norm", m, "row_scales",
               time_calls(be, reps,
                          [&](int) {
                            cuda::launch_row_inv_rms(x.raw(), DType::kBF16, m, k, rms.eps,
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
        product(x, &rms);
        const double e = bench::rel_error(bench::bf16_values(be, out), ref);
        report(name, m, "norm+wgmma", time_calls(be, reps, [&](int) { apart_rms(); }), 0.0);
        report(name, m, "wgmma", time_calls(be, reps, [&](int) { product(h, nullptr); }), 0.0);
        report(name, m, "wgmma_rms", time_calls(be, reps, [&](int) { product(x, &rms); }), e);
      };
      rms_rates(
          "qkv",
          [&](const Tensor& in, const RowRms* r) {
            if (!be.linear_rotary_kv(in, w, Tensor(), qb, layout, cos_sin, RotaryStyle::kHalf, rot,
                                     slots, cb, r))
              raise<Internal>("linear_rotary_kv declined");
          },
          qb);
      Tensor wg = upload_random(be, {2 * d.inter, k}, 23), a = be.alloc({m, d.inter}, DType::kBF16);
      rms_rates(
          "gate_up",
          [&](const Tensor& in, const RowRms* r) {
            if (!be.linear_gated(in, wg, Tensor(), Activation::kSilu, a, r))
              raise<Internal>("linear_gated declined");
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

// cuBLASLt's algorithms for the layer's products at prefill rows, under sustained load.
// The tuner (gemm.cc) times the heuristic's candidates over three calls each, at whatever
// clock the board is at; a long prefill runs the products back to back at the power
// limit, where a configuration that moves fewer bytes per FLOP (larger tiles, clusters
// sharing their loads) may hold a higher clock. For each product at m rows: the
// heuristic's candidates and every other configuration cuBLASLt accepts (algorithm,
// tile of at least 128 x 128, stages, cluster shape, swizzle; no split-K), each timed
// briefly; then the heuristic's candidates and the briefly fastest others after 200 ms
// of the same calls (median of 5 batches of ~40 ms), with their configuration and
// their error against the heuristic's first. Then the layer's four products in sequence
// (32 layers), with the heuristic-quick-fastest and the sustained-fastest, alternately.
struct LtCandidate {
  cublasLtMatmulAlgo_t algo{};
  bool heuristic = false;
  double quick = -1, sustained = -1, err = INFINITY;
};

struct LtProduct {
  const char* name = "";
  int64_t n = 0, k = 0;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<LtCandidate> cands = {};
  std::vector<Tensor> w = {};
  Tensor x = {}, y = {};
  int quick_pick = -1, sustained_pick = -1;
};

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) raise<Internal>("{}: cuBLASLt status {}", what, int(s));
}

template <typename V>
V algo_get(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  V v{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

template <typename V>
void algo_set(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, V v) {
  cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &v, sizeof(v));
}

std::vector<uint32_t> algo_caps(const cublasLtMatmulAlgo_t& algo,
                                cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes);
  std::vector<uint32_t> v(bytes / sizeof(uint32_t));
  if (!v.empty()) cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), bytes, &bytes);
  return v;
}

// Every configuration cuBLASLt accepts for the product, beyond the heuristic's.
std::vector<cublasLtMatmulAlgo_t> lt_configs(cublasLtHandle_t lt, const LtProduct& p, size_t ws) {
  int ids[256];
  int n_ids = 0;
  cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                           CUDA_R_16BF, CUDA_R_16BF, 256, ids, &n_ids);
  std::vector<cublasLtMatmulAlgo_t> out;
  const uint16_t clusters[] = {0, 2, 3, 5, 6, 4, 8};  // auto, 1x1, 2x1, 1x2, 2x2, 4x1, 1x4
  for (int i = 0; i < n_ids; ++i) {
    cublasLtMatmulAlgo_t base{};
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, CUDA_R_16BF, ids[i], &base) != CUBLAS_STATUS_SUCCESS)
      continue;
    std::vector<uint32_t> tiles = algo_caps(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    std::vector<uint32_t> stages = algo_caps(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    if (stages.empty()) stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
    int32_t swizzle = 0;
    size_t bytes = 0;
    cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle,
                                      sizeof(swizzle), &bytes);
    for (uint32_t tile : tiles) {
      for (uint32_t stage : stages) {
        for (uint16_t cluster : clusters) {
          for (uint32_t swz = 0; swz <= (swizzle != 0 ? 1u : 0u); ++swz) {
            cublasLtMatmulAlgo_t algo = base;
            algo_set<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile);
            algo_set<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage);
            algo_set<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster);
            algo_set<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swz);
            algo_set<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
            cublasLtMatmulHeuristicResult_t r{};
            if (cublasLtMatmulAlgoCheck(lt, p.desc, p.a, p.b, p.c, p.c, &algo, &r) !=
                    CUBLAS_STATUS_SUCCESS ||
                r.workspaceSize > ws)
              continue;
            out.push_back(algo);
            if (out.size() >= 1500) return out;  // enough for a sweep
          }
        }
      }
    }
  }
  return out;
}

void gemm_algos(const Dims& d, const std::vector<int64_t>& ms) {
  CudaBackendOptions o;
  cuda::CudaBackend be(o);
  cublasLtHandle_t lt = nullptr;
  check_lt(cublasLtCreate(&lt), "create");
  const size_t ws_bytes = size_t{32} << 20;
  Tensor ws = be.alloc({static_cast<int64_t>(ws_bytes / 4)}, DType::kF32);
  Tensor flush = be.alloc({int64_t{64} << 20}, DType::kF32);  // 256 MB
  cudaStream_t st = be.stream();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto run_algo = [&](LtProduct& p, int i, int call) {
    const float alpha = 1.f, beta = 0.f;
    return cublasLtMatmul(lt, p.desc, &alpha, p.w[call % p.w.size()].raw(), p.a, p.x.raw(), p.b,
                          &beta, p.y.raw(), p.c, p.y.raw(), p.c, &p.cands[i].algo, ws.raw(),
                          ws_bytes, st);
  };
  auto elapsed = [&](auto&& fn, int calls) {  // seconds per call
    cudaEventRecord(e0, st);
    for (int c = 0; c < calls; ++c) fn(c);
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float msec = 0;
    cudaEventElapsedTime(&msec, e0, e1);
    return msec * 1e-3 / calls;
  };
  for (int64_t m : ms) {
    std::vector<LtProduct> ps = {
        {.name = "qkv", .n = (d.heads + 2 * d.kv_heads) * d.head_dim, .k = d.hidden},
        {.name = "o", .n = d.hidden, .k = d.heads * d.head_dim},
        {.name = "gate_up", .n = 2 * d.inter, .k = d.hidden},
        {.name = "down", .n = d.hidden, .k = d.inter}};
    std::printf("\n%-8s %6s %4s %3s %4s %5s %5s %7s %5s %9s %9s %9s %9s\n", "gemm", "m", "cand",
                "heu", "algo", "tile", "stage", "cluster", "swz", "quick us", "sust. us", "TFLOP/s",
                "rel.err");
    for (LtProduct& p : ps) {
      for (int c = 0; c < 2; ++c) p.w.push_back(upload_random(be, {p.n, p.k}, 300 + c));
      p.x = upload_random(be, {m, p.k}, 11 + m);
      p.y = be.alloc({m, p.n}, DType::kBF16);
      check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
      check_lt(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, p.k, p.n, p.k), "layout a");
      check_lt(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, p.k, m, p.k), "layout b");
      check_lt(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, p.n, m, p.n), "layout c");
      cublasLtMatmulPreference_t pref = nullptr;
      check_lt(cublasLtMatmulPreferenceCreate(&pref), "pref");
      const uint64_t wsb = ws_bytes;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                           sizeof(wsb));
      std::vector<cublasLtMatmulHeuristicResult_t> heur(32);
      int count = 0;
      check_lt(cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.a, p.b, p.c, p.c, pref, 32, heur.data(),
                                              &count),
               "heuristic");
      cublasLtMatmulPreferenceDestroy(pref);
      for (int i = 0; i < count; ++i) p.cands.push_back({heur[i].algo, true});
      const std::vector<cublasLtMatmulAlgo_t> others = lt_configs(lt, p, ws_bytes);
      for (const cublasLtMatmulAlgo_t& al : others) p.cands.push_back({al, false});
      const double flops = 2.0 * m * p.n * p.k;
      check_lt(run_algo(p, 0, 0), "reference");
      const std::vector<float> ref = bench::bf16_values(be, p.y);
      // Quick times first, all candidates in a row, as the tuner sees them (the heuristic's
      // after an L2 flush each, as the tuner; the others without, to keep the sweep short);
      // errors only for those timed under load.
      for (size_t i = 0; i < p.cands.size(); ++i) {
        LtCandidate& c = p.cands[i];
        std::vector<double> t;
        for (int rep = 0; rep < 3; ++rep) {
          if (c.heuristic) cudaMemsetAsync(flush.raw(), rep, size_t{256} << 20, st);
          cudaEventRecord(e0, st);
          const cublasStatus_t s = run_algo(p, static_cast<int>(i), rep);
          cudaEventRecord(e1, st);
          cudaEventSynchronize(e1);
          if (s != CUBLAS_STATUS_SUCCESS) {
            t.clear();
            break;
          }
          float msec = 0;
          cudaEventElapsedTime(&msec, e0, e1);
          if (rep > 0) t.push_back(msec * 1e-3);
        }
        if (!t.empty()) c.quick = bench::median(t);
      }
      // Sustained: the heuristic's candidates and the 12 briefly fastest others.
      std::vector<size_t> order;
      for (size_t i = 0; i < p.cands.size(); ++i)
        if (!p.cands[i].heuristic && p.cands[i].quick > 0) order.push_back(i);
      std::sort(order.begin(), order.end(),
                [&](size_t x, size_t y) { return p.cands[x].quick < p.cands[y].quick; });
      if (order.size() > 12) order.resize(12);
      for (int i = 0; i < count; ++i) order.insert(order.begin() + i, static_cast<size_t>(i));
      std::printf("%-8s m %lld: %d heuristic candidates, %zu other configurations accepted\n",
                  p.name, static_cast<long long>(m), count, others.size());
      for (size_t i : order) {
        LtCandidate& c = p.cands[i];
        if (c.quick < 0) continue;
        be.fill_zero(p.y);
        run_algo(p, static_cast<int>(i), 0);
        c.err = bench::rel_error(bench::bf16_values(be, p.y), ref);
        auto fn = [&](int k) { run_algo(p, static_cast<int>(i), k); };
        elapsed(fn, std::max(1, static_cast<int>(0.2 / c.quick)));
        std::vector<double> t;
        for (int b = 0; b < 5; ++b)
          t.push_back(elapsed(fn, std::max(1, static_cast<int>(0.04 / c.quick))));
        c.sustained = bench::median(t);
        const cublasLtMatmulAlgo_t& al = c.algo;
        std::printf("%-8s %6lld %4zu %3s %4d %5u %5u %7u %5u %9.1f %9.1f %9.1f %9.2e\n", p.name,
                    static_cast<long long>(m), i, c.heuristic ? "yes" : "-",
                    algo_get<int32_t>(al, CUBLASLT_ALGO_CONFIG_ID),
                    algo_get<uint32_t>(al, CUBLASLT_ALGO_CONFIG_TILE_ID),
                    algo_get<uint32_t>(al, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                    unsigned{algo_get<uint16_t>(al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)},
                    algo_get<uint32_t>(al, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), c.quick * 1e6,
                    c.sustained * 1e6, flops / c.sustained / 1e12, c.err);
        std::printf("RESULT lt_%s_m%lld_c%zu quick_us %.1f sustained_us %.1f tflops %.1f\n", p.name,
                    static_cast<long long>(m), i, c.quick * 1e6, c.sustained * 1e6,
                    flops / c.sustained / 1e12);
      }
      for (size_t i = 0; i < p.cands.size(); ++i) {
        const LtCandidate& c = p.cands[i];
        if (c.err > 1e-2) continue;  // a wrong candidate is never picked
        if (c.heuristic && c.quick > 0 &&
            (p.quick_pick < 0 || c.quick < p.cands[p.quick_pick].quick))
          p.quick_pick = static_cast<int>(i);
        if (c.sustained > 0 &&
            (p.sustained_pick < 0 || c.sustained < p.cands[p.sustained_pick].sustained))
          p.sustained_pick = static_cast<int>(i);
      }
      std::printf("%-8s m %lld: tuner's pick %d, sustained pick %d\n", p.name,
                  static_cast<long long>(m), p.quick_pick, p.sustained_pick);
    }
    // The layer's products in sequence, 32 layers a pass, each choice alternately.
    double layer_flops = 0;
    for (const LtProduct& p : ps) layer_flops += 32 * 2.0 * m * p.n * p.k;
    std::vector<double> tq, ts;
    for (int rep = 0; rep < 8; ++rep) {
      for (int which = 0; which < 2; ++which) {
        const double s = elapsed(
            [&](int c) {
              for (LtProduct& p : ps) run_algo(p, which == 0 ? p.quick_pick : p.sustained_pick, c);
            },
            32);
        if (rep > 0) (which == 0 ? tq : ts).push_back(s * 32);
      }
    }
    std::printf(
        "layers m %lld: tuner's picks %.2f ms (%.1f TFLOP/s), sustained picks %.2f ms "
        "(%.1f TFLOP/s) for 32 layers' products\n",
        static_cast<long long>(m), bench::median(tq) * 1e3, layer_flops / bench::median(tq) / 1e12,
        bench::median(ts) * 1e3, layer_flops / bench::median(ts) / 1e12);
    std::printf("RESULT lt_layers_m%lld tuner_ms %.3f sustained_ms %.3f\n",
                static_cast<long long>(m), bench::median(tq) * 1e3, bench::median(ts) * 1e3);
    for (LtProduct& p : ps) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.desc);
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cublasLtDestroy(lt);
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    v.push_back(std::stoll(s.substr(i, j - i)));
    i = j + 1;
  }
  return v;
}

int run(int argc, char** argv) {
  Dims d;
  std::vector<int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 8192};
  std::string only;
  int reps = 30;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) {
      d = bench::model_dims(load_json_file(argv[++i]));
    } else if (a == "--m" && i + 1 < argc) {
      ms = parse_list(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else {
      raise<InvalidArgument>("unknown argument '{}'", a);
    }
  }
  if (only.empty() || only == "gemm") gemm_rates(d, ms, reps);
  if (only.empty() || only == "rows") row_rates(d, reps);
  if (only == "lt_algos") gemm_algos(d, ms);
  if (only == "wgmma") wgmma_rates(d, ms, reps);
  if (only == "wgmma" || only == "epilogue") epilogue_rates(d, ms, reps);
  return 0;
}

}  // namespace
}  // namespace tachyon

int main(int argc, char** argv) {
  try {
    return tachyon::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tachyon_kernel_bench: %s\n", e.what());
    return 1;
  }
}
