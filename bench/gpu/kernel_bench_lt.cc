// cuBLASLt's configurations for the layer's products, timed briefly and under
// sustained load (--only lt_algos).
#include "kernel_bench.h"

namespace tachyon::bench {

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
namespace {

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

}  // namespace

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

}  // namespace tachyon::bench
