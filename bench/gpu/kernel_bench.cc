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
//   quant (only when asked for): the quantized products (int4 g128, int8 and fp8 per
//         channel) against bf16 at the layer's products (kernel_bench_quant.cc);
//   lora (only when asked for): one layer's LoRA adapters (rank 16, 7 projections)
//         against its base products at decode and prefill steps (kernel_bench_lora.cc);
//   wgmma (only when asked for): the wgmma GEMM's configurations against cuBLASLt at the
//         layer's products, plain and (gate_up) gated; then (also alone, as epilogue)
//         the products with the rotary and KV write or the residual add in the
//         epilogue against what they replace.
//
// Usage: tachyon_kernel_bench [--config CONFIG.json] [--m 1,2,4,...]
//                             [--only gemm|rows|lt_algos|wgmma|epilogue|quant|lora]
//                             [--reps N]
// Lines starting with "RESULT" are for scripts.
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "kernel_bench.h"

namespace tachyon::bench {

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
                            s.n, s.k, s.n, false, be.stream());
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

namespace {

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
  if (only == "quant") quant_rates(d, ms, reps);
  if (only == "lora") lora_rates(d, reps);
  return 0;
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  try {
    return tachyon::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tachyon_kernel_bench: %s\n", e.what());
    return 1;
  }
}
