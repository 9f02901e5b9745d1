// Kernel-level rates on the GPU at a model's shapes, timed with CUDA events around
// back-to-back launches (what a recorded decode step sees), weights rotated over enough
// copies that they stream from memory rather than the L2, and every variant's relative
// error against another path's output printed beside its rate.
//
//   gemm: y[m, n] = x[m, k] w[n, k]^T for the model's five products (qkv, o, gate_up,
//         down, lm_head) at several m: each matrix-vector variant (x through L1 or shared
//         memory, warps per row, warps per block) for m <= 4, cuBLASLt with tuned
//         algorithm choice and with the heuristic's first;
//   rows: add_norm and the gated activation at decode and prefill rows.
//
// Usage: tachyon_kernel_bench [--config CONFIG.json] [--m 1,2,4,...] [--only gemm|rows]
//                             [--reps N]
// Lines starting with "RESULT" are for scripts.
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

void gemm_rates(const Dims& d, const std::vector<int64_t>& ms, int reps) {
  // One backend tuning its algorithm choice, one on the heuristic's first, whatever the
  // caller's TACHYON_GEMM_TUNE (restored after).
  CudaBackendOptions o;
  const char* caller = std::getenv("TACHYON_GEMM_TUNE");
  const std::string saved = caller != nullptr ? caller : "";
  setenv("TACHYON_GEMM_TUNE", "1", 1);
  cuda::CudaBackend tuned(o);
  setenv("TACHYON_GEMM_TUNE", "0", 1);
  cuda::CudaBackend heur(o);
  if (caller != nullptr)
    setenv("TACHYON_GEMM_TUNE", saved.c_str(), 1);
  else
    unsetenv("TACHYON_GEMM_TUNE");
  tuned.set_gemv(false);
  heur.set_gemv(false);
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
    std::vector<Tensor> wt, wh;  // the same values on both backends
    for (int c = 0; c < copies; ++c) {
      wt.push_back(upload_random(tuned, {s.n, s.k}, 100 + c));
      wh.push_back(upload_random(heur, {s.n, s.k}, 100 + c));
    }
    for (int64_t m : ms) {
      if (s.n == d.vocab && m > 256) continue;  // the lm_head runs on the last rows only
      Tensor xt = upload_random(tuned, {m, s.k}, 7 + m);
      Tensor xh = upload_random(heur, {m, s.k}, 7 + m);
      Tensor yt = tuned.alloc({m, s.n}, DType::kBF16);
      Tensor yh = heur.alloc({m, s.n}, DType::kBF16);
      heur.linear(xh, wh[0], Tensor(), yh, 0, Activation::kIdentity);
      const std::vector<float> ref = bench::bf16_values(heur, yh);
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
        struct Variant {
          int bits;
          const char* name;
        };
        for (const Variant v :
             {Variant{0, "gemv_l1"}, Variant{cuda::kGemvSmemX, "gemv_sx"},
              Variant{cuda::kGemvSmemX | cuda::kGemvSplit2, "gemv_sx_s2"},
              Variant{cuda::kGemvSmemX | cuda::kGemvSplit4, "gemv_sx_s4"},
              Variant{cuda::kGemvSmemX | cuda::kGemvSplit2 | cuda::kGemvWarps16, "gemv_sx_s2_w16"},
              Variant{cuda::kGemvSmemX | cuda::kGemvSplit2 | cuda::kGemvWarps32, "gemv_sx_s2_w32"},
              Variant{cuda::kGemvSmemX | cuda::kGemvSplit4 | cuda::kGemvWarps16, "gemv_sx_s4_w16"},
              Variant{cuda::kGemvSmemX | cuda::kGemvSplit4 | cuda::kGemvWarps32, "gemv_sx_s4_w32"},
              Variant{cuda::kGemvSmemX | cuda::kGemvSplit2 | cuda::kGemvWideLongK, "gemv_groups"},
              Variant{cuda::kGemvDefault | cuda::kGemvPersistent, "gemv_persist"},
              Variant{cuda::kGemvDefault, "gemv_default"}}) {
          const int variant = v.bits;
          auto call = [&](int i) {
            cuda::launch_gemv(xt.raw(), wt[i % copies].raw(), DType::kBF16, yt.raw(), DType::kBF16,
                              m, s.n, s.k, s.n, tuned.stream(), variant);
          };
          tuned.fill_zero(yt);
          call(0);
          const double err = bench::rel_error(bench::bf16_values(tuned, yt), ref);
          const double t = time_calls(tuned, reps, call);
          report(v.name, t, err);
          if (variant == cuda::kGemvDefault) {  // the same without programmatic launch
            const bool pdl = cuda::pdl_enabled();
            cuda::set_pdl_enabled(false);
            report("gemv_nopdl", time_calls(tuned, reps, call), err);
            cuda::set_pdl_enabled(pdl);
          }
        }
      }
      if (m >= 2 && m <= cuda::kSkinnyMaxRows &&
          cuda::skinny_gemm_supports(DType::kBF16, DType::kBF16, m, s.n, s.k, xt.raw(), wt[0].raw(),
                                     s.n)) {
        const cuda::SkinnyPlan plan = cuda::plan_skinny_gemm(m, s.n, s.k, tuned.num_sms());
        Tensor part = tuned.alloc({static_cast<int64_t>(plan.partial_bytes / 4 + 1)}, DType::kF32);
        Tensor counters = tuned.alloc({plan.counter_count + 1}, DType::kI32);
        tuned.fill_zero(counters);
        auto call = [&](int i) {
          cuda::launch_skinny_gemm(xt.raw(), wt[i % copies].raw(), DType::kBF16, yt.raw(),
                                   DType::kBF16, m, s.n, s.k, s.n, plan, part.raw(),
                                   counters.data<int32_t>(), tuned.stream());
        };
        tuned.fill_zero(yt);
        call(0);
        const double err = bench::rel_error(bench::bf16_values(tuned, yt), ref);
        const double t = time_calls(tuned, reps, call);
        char name[32];
        std::snprintf(name, sizeof(name), "skinny_s%d", plan.splits);
        report(name, t, err);
      }
      {
        tuned.linear(xt, wt[0], Tensor(), yt, 0, Activation::kIdentity);
        const double err = bench::rel_error(bench::bf16_values(tuned, yt), ref);
        const double t = time_calls(tuned, reps, [&](int i) {
          tuned.linear(xt, wt[i % copies], Tensor(), yt, 0, Activation::kIdentity);
        });
        report("lt_tuned", t, err);
      }
      {
        const double t = time_calls(heur, reps, [&](int i) {
          heur.linear(xh, wh[i % copies], Tensor(), yh, 0, Activation::kIdentity);
        });
        report("lt_heur", t, 0.0);
      }
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
