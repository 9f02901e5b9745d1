// Times cpu::gemm_xwt on the matrix shapes of a Llama-shaped 349M model (hidden 1024,
// 24 layers, 16 heads / 8 KV heads of 64, intermediate 2816, vocab 32000; or the
// --dims given: tiny-kjv-chat is 256,128,704,32000,6) and derives the GEMM part of a
// decode token and of a 512-token prefill. --packed runs every product on weights in
// the packed layout (cpu::pack_weight) instead of the checkpoint's.
//
//   cpu_gemm_bench [--isa active|all|portable|avx2|avx512] [--dtype bf16,f16]
//                  [--m 1,512] [--threads 2] [--arena-mb 1024] [--no-model]
//                  [--dims hidden,kv,inter,vocab,layers] [--packed] [--only SHAPE]
//
// m < 128 rotates over copies of the weights spread through an arena (default 1 GiB, over
// twice the 480 MiB L3 this machine reports) so each call streams from memory.
// Each case times single calls for about a second: the median, the 10th percentile
// (p10) and the CPUs other processes used meanwhile are reported (the machine and its
// memory are shared; p10 shows what the code does when it has them to itself). The
// bound columns compare with a plain read of as many bytes timed alternately (m = 1)
// or with the FMA peak (m > 1). Run it under `chrt -f 50` on a busy machine.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "bench_kernels.h"
#include "bench_util.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace tachyon::bench {
namespace {

struct Shape {
  const char* name;
  int64_t k, n;
  int per_layer;  // how many such products a layer has (0: once per model)
};

// The model's dimensions (--dims): the 349M shape by default.
struct Dims {
  int64_t hidden = 1024, kv = 512, inter = 2816, vocab = 32000;
  int layers = 24;

  // Separate projections, as a checkpoint stores them.
  std::vector<Shape> shapes() const {
    return {{"q", hidden, hidden, 1},   {"k/v", hidden, kv, 2},
            {"o", hidden, hidden, 1},   {"gate/up", hidden, inter, 2},
            {"down", inter, hidden, 1}, {"lm_head", hidden, vocab, 0}};
  }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

void fill_weights(uint16_t* w, size_t count, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  // Random values for a prefix, then repeated: filling a GiB element by element with a
  // good generator takes long and the values do not matter to the timing.
  const size_t unique = std::min<size_t>(count, 1 << 20);
  for (size_t i = 0; i < unique; ++i) {
    const float v = dist(rng);
    w[i] = dtype == DType::kBF16 ? f32_to_bf16(v).bits : f32_to_f16(v).bits;
  }
  for (size_t i = unique; i < count; i += unique) {
    std::memcpy(w + i, w, std::min(unique, count - i) * sizeof(uint16_t));
  }
}

std::vector<float> random_floats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Options {
  Dims dims;
  bool packed = false;  // weights in the packed layout (pack_weight)
  std::string only;     // run only the shape of this name (table rows)
  std::vector<cpu::CpuIsa> isas;
  std::vector<DType> dtypes = {DType::kBF16, DType::kF16};
  std::vector<int64_t> ms = {1, 512};
  int threads = 2;
  size_t arena_mb = 1024;
  bool model = true;
};

// One table row. bound: the read-probe GB/s (m = 1) or the FMA peak GFLOP/s (m > 1)
// measured on this machine; share: the fraction of it reached (median).
void print_row(const Shape& s, int64_t m, DType dtype, cpu::CpuIsa isa, const Timing& t,
               double bound, double share) {
  const double bytes = static_cast<double>(s.k * s.n * 2);
  const double flops = 2.0 * static_cast<double>(m * s.k * s.n);
  // m = 1 is bounded by memory (GB/s of weights), larger m by arithmetic (GFLOP/s).
  const double scale = m == 1 ? bytes / 1e9 : flops / 1e9;
  std::printf("| %s | %lld->%lld | %lld | %s | %s | %.3f | %.3f | %.1f | %.1f | ", s.name,
              static_cast<long long>(s.k), static_cast<long long>(s.n), static_cast<long long>(m),
              std::string(dtype_name(dtype)).c_str(), std::string(cpu::cpu_isa_name(isa)).c_str(),
              t.median * 1e3, t.p10 * 1e3, scale / t.median, scale / t.p10);
  if (bound > 0) {
    std::printf("%.1f | %.0f%% | %.2f |\n", bound, 100 * share, t.other_cpus);
  } else {
    std::printf("- | - | %.2f |\n", t.other_cpus);
  }
}

// Peak f32 FMA rate of the path's vector width on all threads of the pool (0 when the
// path has no FMA reference loop).
double fma_peak_gflops(cpu::CpuIsa isa, ThreadPool& pool) {
#if defined(__x86_64__)
  if (isa == cpu::CpuIsa::kPortable) return 0;
  const bool wide = isa == cpu::CpuIsa::kAvx512;
  constexpr int64_t kIters = 2'000'000;
  static volatile float seed = 1.f;
  static volatile float sink = 0.f;
  (void)sink;
  Timing t = time_calls([&](int64_t) {
    pool.run(pool.num_threads(), [&](int64_t i) {
      sink = wide ? fma_chains_avx512(kIters, seed + i) : fma_chains_avx2(kIters, seed + i);
    });
  });
  const double flops = (wide ? kFmaFlopsAvx512 : kFmaFlopsAvx2) * kIters * pool.num_threads();
  return flops / t.median / 1e9;
#else
  return 0;
#endif
}

// Reads `bytes` from p split over the pool as the GEMV splits its rows.
void read_probe(const void* p, size_t bytes, ThreadPool& pool) {
  static volatile float sink = 0.f;
  (void)sink;
  const int64_t tasks = pool.num_threads() * 4;
  const size_t per = bytes / sizeof(float) / static_cast<size_t>(tasks) / 64 * 64;
  pool.run(tasks, [&](int64_t t) {
    sink = read_sum(static_cast<const float*>(p) + static_cast<size_t>(t) * per, per);
  });
}

// The GEMMs of one decode step (m = 1) or one prefill (m > 1) through the whole model,
// weights laid out as a real checkpoint would be (one allocation per matrix).
struct Model {
  struct Layer {
    const uint16_t *q, *k, *v, *o, *gate, *up, *down;
  };
  Dims d;
  bool packed;
  std::vector<AlignedArray<uint16_t>> storage;
  std::vector<Layer> layers;
  const uint16_t* lm_head = nullptr;

  const uint16_t* alloc(int64_t n, int64_t k, DType dtype, uint32_t seed) {
    const size_t count = static_cast<size_t>(n * k);
    storage.push_back(aligned_array<uint16_t>(count));
    fill_weights(storage.back().get(), count, dtype, seed);
    if (!packed) return storage.back().get();
    storage.push_back(
        aligned_array<uint16_t>(static_cast<size_t>(cpu::packed_weight_elems(dtype, n, k))));
    cpu::pack_weight(storage[storage.size() - 2].get(), dtype, n, k, storage.back().get());
    return storage.back().get();
  }
  Model(const Dims& dims, DType dtype, bool pack) : d(dims), packed(pack) {
    uint32_t seed = 100;
    for (int l = 0; l < d.layers; ++l) {
      Layer L;
      L.q = alloc(d.hidden, d.hidden, dtype, seed++);
      L.k = alloc(d.kv, d.hidden, dtype, seed++);
      L.v = alloc(d.kv, d.hidden, dtype, seed++);
      L.o = alloc(d.hidden, d.hidden, dtype, seed++);
      L.gate = alloc(d.inter, d.hidden, dtype, seed++);
      L.up = alloc(d.inter, d.hidden, dtype, seed++);
      L.down = alloc(d.hidden, d.inter, dtype, seed++);
      layers.push_back(L);
    }
    lm_head = alloc(d.vocab, d.hidden, dtype, seed++);
  }
};

// One product through gemm_xwt_multi_isa (packed or not).
void product(cpu::CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx,
             std::initializer_list<cpu::GemmWeight> entries, ThreadPool& pool) {
  cpu::gemm_xwt_multi_isa(isa, x, m, k, ldx, std::span(entries.begin(), entries.size()), &pool);
}

// Runs the model's GEMMs for m rows; fused puts q/k/v and gate/up in one call each.
void model_gemms(const Model& model, DType dtype, cpu::CpuIsa isa, int64_t m, bool fused,
                 const float* x, float* qkv, float* gu, float* h, float* logits, ThreadPool& pool) {
  using cpu::GemmWeight;
  const Dims& d = model.d;
  const bool p = model.packed;
  const int64_t ld_qkv = d.hidden + 2 * d.kv, ld_gu = 2 * d.inter;
  for (const Model::Layer& L : model.layers) {
    const GemmWeight q{L.q, dtype, d.hidden, nullptr, qkv, ld_qkv, p};
    const GemmWeight k{L.k, dtype, d.kv, nullptr, qkv + d.hidden, ld_qkv, p};
    const GemmWeight v{L.v, dtype, d.kv, nullptr, qkv + d.hidden + d.kv, ld_qkv, p};
    if (fused) {
      product(isa, x, m, d.hidden, d.hidden, {q, k, v}, pool);
    } else {
      for (const GemmWeight& e : {q, k, v}) product(isa, x, m, d.hidden, d.hidden, {e}, pool);
    }
    // Attention output -> o (the attention itself is not a GEMM here; reuse q's part).
    product(isa, qkv, m, d.hidden, ld_qkv, {{L.o, dtype, d.hidden, nullptr, h, d.hidden, p}}, pool);
    const GemmWeight g{L.gate, dtype, d.inter, nullptr, gu, ld_gu, p};
    const GemmWeight u{L.up, dtype, d.inter, nullptr, gu + d.inter, ld_gu, p};
    if (fused) {
      product(isa, h, m, d.hidden, d.hidden, {g, u}, pool);
    } else {
      for (const GemmWeight& e : {g, u}) product(isa, h, m, d.hidden, d.hidden, {e}, pool);
    }
    product(isa, gu, m, d.inter, ld_gu, {{L.down, dtype, d.hidden, nullptr, h, d.hidden, p}}, pool);
  }
  // Logits of the last row only (a prefill needs them for its last token).
  product(isa, h + (m - 1) * d.hidden, 1, d.hidden, d.hidden,
          {{model.lm_head, dtype, d.vocab, nullptr, logits, d.vocab, p}}, pool);
}

// Elements of one weight copy, and its room in the arena (a 4 KiB-aligned start).
size_t weight_elems(const Options& opt, DType dtype, const Shape& s) {
  return static_cast<size_t>(opt.packed ? cpu::packed_weight_elems(dtype, s.n, s.k) : s.k * s.n);
}
size_t weight_stride(const Options& opt, DType dtype, const Shape& s) {
  return (weight_elems(opt, dtype, s) + 2047) / 2048 * 2048;
}

int run(const Options& opt) {
  const size_t arena_elems = (opt.arena_mb << 20) / sizeof(uint16_t);
  for (DType dtype : opt.dtypes)
    for (const Shape& s : opt.dims.shapes()) {
      if (!opt.only.empty() && opt.only != s.name) continue;
      const size_t need = weight_stride(opt, dtype, s);
      if (need > arena_elems) {
        std::fprintf(stderr, "--arena-mb %zu holds no copy of the %s weights (%zu MiB)\n",
                     opt.arena_mb, s.name, (need * sizeof(uint16_t) + (1 << 20) - 1) >> 20);
        return 2;
      }
    }
  ThreadPool pool(opt.threads);
  std::printf("# cpu_gemm_bench: %d threads, active path %s\n", opt.threads,
              std::string(cpu::cpu_isa_name(cpu::active_cpu_isa())).c_str());

  AlignedArray<uint16_t> arena = aligned_array<uint16_t>(arena_elems);
  for (DType dtype : opt.dtypes) {
    fill_weights(arena.get(), arena_elems, dtype, 7);
    for (cpu::CpuIsa isa : opt.isas) {
      std::printf("\n## %s weights, %s path\n\n", std::string(dtype_name(dtype)).c_str(),
                  std::string(cpu::cpu_isa_name(isa)).c_str());
      const double peak = fma_peak_gflops(isa, pool);
      std::printf(
          "| shape | k->n | m | dtype | path | median ms | p10 ms | GB/s (m=1) or GFLOP/s, "
          "median | same, p10 | bound: read probe GB/s (m=1) or FMA peak | median share of "
          "bound | other CPUs |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
      std::map<int64_t, std::pair<double, double>> per_token;  // m -> model GEMM s (median, p10)
      for (int64_t m : opt.ms) {
        for (const Shape& s : opt.dims.shapes()) {
          if (!opt.only.empty() && opt.only != s.name) continue;
          const size_t elems = weight_elems(opt, dtype, s);
          // Copies start at 4 KiB-aligned offsets spread through the arena (run() checked
          // that one fits).
          const size_t stride = weight_stride(opt, dtype, s);
          // Up to a few dozen rows a product still streams its weights from memory in a
          // real forward pass, so those rotate over the copies too.
          const size_t copies = m < 128 ? std::max<size_t>(1, arena_elems / stride) : 1;
          std::vector<float> x = random_floats(static_cast<size_t>(m * s.k), 11);
          std::vector<float> y(static_cast<size_t>(m * s.n));
          auto weights = [&](int64_t i) {
            return arena.get() + static_cast<size_t>(i % static_cast<int64_t>(copies)) * stride;
          };
          // Packed: the arena's values are read as packed panels (the timing does not
          // depend on them).
          auto gemm = [&](int64_t i) {
            product(isa, x.data(), m, s.k, s.k,
                    {{weights(i), dtype, s.n, nullptr, y.data(), s.n, opt.packed}}, pool);
          };
          Timing t;
          double bound = 0, share = 0;
          if (m == 1) {
            // As many bytes read by a plain prefetching loop, call for call alternately:
            // the bound under the same (shared, varying) memory conditions. It reads the
            // copy half a rotation away, as cold as the one the product reads.
            const size_t bytes = elems * sizeof(uint16_t);
            const int64_t half = static_cast<int64_t>(copies / 2);
            PairTiming pt =
                time_pair(gemm, [&](int64_t i) { read_probe(weights(i + half), bytes, pool); });
            t = pt.a;
            bound = static_cast<double>(bytes) / pt.b.median / 1e9;
            share = pt.ratio;
          } else {
            t = time_calls(gemm);
            bound = peak;
            share = peak > 0 ? 2.0 * static_cast<double>(m * s.k * s.n) / t.median / 1e9 / peak : 0;
          }
          print_row(s, m, dtype, isa, t, bound, share);
          const int count = s.per_layer == 0 ? 1 : opt.dims.layers * s.per_layer;
          per_token[m].first += count * t.median;
          per_token[m].second += count * t.p10;
        }
      }
      std::printf("\nImplied for the whole model's GEMMs (%d layers + lm_head), median / p10:\n",
                  opt.dims.layers);
      for (const auto& [m, sec] : per_token) {
        if (m == 1) {
          std::printf("  decode: %.2f / %.2f ms per token -> %.1f / %.1f tokens/s\n",
                      sec.first * 1e3, sec.second * 1e3, 1.0 / sec.first, 1.0 / sec.second);
        } else {
          std::printf("  m=%lld (lm_head at m=%lld too): %.1f / %.1f ms -> %.1f / %.1f tokens/s\n",
                      static_cast<long long>(m), static_cast<long long>(m), sec.first * 1e3,
                      sec.second * 1e3, static_cast<double>(m) / sec.first,
                      static_cast<double>(m) / sec.second);
        }
      }
    }
    if (!opt.model) continue;
    // Whole-model runs: one checkpoint-like set of weights (697 MB in 16-bit for 349M).
    const Dims& d = opt.dims;
    Model model(d, dtype, opt.packed);
    for (cpu::CpuIsa isa : opt.isas) {
      for (int64_t m : opt.ms) {
        std::vector<float> x = random_floats(static_cast<size_t>(m * d.hidden), 3);
        std::vector<float> qkv(static_cast<size_t>(m * (d.hidden + 2 * d.kv)));
        std::vector<float> gu(static_cast<size_t>(m * 2 * d.inter));
        std::vector<float> h = random_floats(static_cast<size_t>(m * d.hidden), 4);
        std::vector<float> logits(static_cast<size_t>(d.vocab));
        for (bool fused : {false, true}) {
          Timing t = time_calls(
              [&](int64_t) {
                model_gemms(model, dtype, isa, m, fused, x.data(), qkv.data(), gu.data(), h.data(),
                            logits.data(), pool);
              },
              m == 1 ? 3.0 : 10.0, 3);
          const double bytes =
              2.0 * (d.layers * (d.hidden * (2 * d.hidden + 2 * d.kv) + 3 * d.hidden * d.inter) +
                     d.hidden * d.vocab);
          std::printf(
              "model %s %s m=%lld %s: median %.2f ms -> %.1f tokens/s (%.1f GB/s of weights); "
              "p10 %.2f ms -> %.1f tokens/s; %lld runs, other CPUs %.2f\n",
              std::string(dtype_name(dtype)).c_str(), std::string(cpu::cpu_isa_name(isa)).c_str(),
              static_cast<long long>(m), fused ? "fused qkv+gate/up" : "separate", t.median * 1e3,
              static_cast<double>(m) / t.median, bytes / t.median / 1e9, t.p10 * 1e3,
              static_cast<double>(m) / t.p10, static_cast<long long>(t.calls), t.other_cpus);
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace tachyon::bench

namespace {

int parse_and_run(int argc, char** argv) {
  using namespace tachyon;
  bench::Options opt;
  std::string isa = "active";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--isa") {
      isa = next();
    } else if (a == "--dtype") {
      opt.dtypes.clear();
      for (const auto& d : bench::split(next())) {
        auto parsed = parse_dtype(d);
        if (!parsed) {
          std::fprintf(stderr, "unknown dtype %s\n", d.c_str());
          return 2;
        }
        opt.dtypes.push_back(*parsed);
      }
    } else if (a == "--m") {
      opt.ms.clear();
      for (const auto& m : bench::split(next())) opt.ms.push_back(std::stoll(m));
    } else if (a == "--threads") {
      opt.threads = std::stoi(next());
    } else if (a == "--arena-mb") {
      opt.arena_mb = std::stoull(next());
    } else if (a == "--dims") {
      const auto v = bench::split(next());
      if (v.size() != 5) {
        std::fprintf(stderr, "--dims takes hidden,kv,inter,vocab,layers\n");
        return 2;
      }
      opt.dims = {std::stoll(v[0]), std::stoll(v[1]), std::stoll(v[2]), std::stoll(v[3]),
                  std::stoi(v[4])};
    } else if (a == "--only") {
      opt.only = next();
    } else if (a == "--packed") {
      opt.packed = true;
    } else if (a == "--no-model") {
      opt.model = false;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  for (const auto& name : bench::split(isa)) {
    if (name == "active") {
      opt.isas.push_back(cpu::active_cpu_isa());
    } else if (name == "all") {
      for (auto i : {cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512}) {
        if (cpu::cpu_isa_supported(i)) opt.isas.push_back(i);
      }
    } else if (auto parsed = cpu::parse_cpu_isa(name); parsed && cpu::cpu_isa_supported(*parsed)) {
      opt.isas.push_back(*parsed);
    } else {
      std::fprintf(stderr, "path %s is unknown or unsupported here\n", name.c_str());
      return 2;
    }
  }
  for (DType d : opt.dtypes) {
    if (d != DType::kBF16 && d != DType::kF16) {
      std::fprintf(stderr, "--dtype takes bf16 and/or f16\n");
      return 2;
    }
  }
  const auto& d = opt.dims;
  const bool rows_ok = std::all_of(opt.ms.begin(), opt.ms.end(), [](int64_t m) { return m >= 1; });
  if (opt.threads < 1 || !rows_ok || d.hidden < 1 || d.kv < 1 || d.inter < 1 || d.vocab < 1 ||
      d.layers < 1) {
    std::fprintf(stderr, "--threads, --m and --dims take positive numbers\n");
    return 2;
  }
  return bench::run(opt);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return parse_and_run(argc, argv);
  } catch (const std::invalid_argument&) {
    std::fprintf(stderr, "cpu_gemm_bench: a numeric flag got something that is not a number\n");
  } catch (const std::out_of_range&) {
    std::fprintf(stderr, "cpu_gemm_bench: a numeric flag's value is out of range\n");
  }
  return 2;
}
