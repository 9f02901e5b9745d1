// Whether a serving step's bandwidth-bound decode attention and compute-bound matrix
// products can run side by side on disjoint sets of SMs and finish sooner than one after
// the other: the question behind splitting a step into two micro-batches (one's
// attention beside the other's products).
//
// The SMs are split with green contexts (driver API: cuDevSmResourceSplitByCount,
// cuGreenCtxCreate, cuGreenCtxStreamCreate). For each split (attention on A SMs, the
// products on the rest) it times, with CUDA events, over `reps` back-to-back rounds:
//   - decode attention alone on its partition (TB/s of K/V read),
//   - the four products of a layer (qkv, o, gate_up, down; cuBLASLt) alone on theirs,
//   - both at once (one stream each, started together),
// against both one after the other on the whole GPU. Every partitioned output is
// compared with the whole GPU's (relative L2 error), so a launch that did not run shows.
//
// Usage: tachyon_overlap_bench [--config CONFIG.json] [--seqs 400] [--ctx 1536]
//                              [--rows 400] [--reps 20] [--splits 48,64,80,96,112]
// Lines starting with "RESULT" are for scripts.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "device_values.h"
#include "model_dims.h"

namespace tachyon {
namespace {

#define OVERLAP_CU_CHECK(expr)                                                           \
  do {                                                                                   \
    CUresult r_ = (expr);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      const char* s_ = nullptr;                                                          \
      cuGetErrorString(r_, &s_);                                                         \
      raise<Internal>("{} failed: {} ({})", #expr, s_ ? s_ : "?", static_cast<int>(r_)); \
    }                                                                                    \
  } while (0)

std::vector<int32_t> parse_list(const std::string& s) {
  std::vector<int32_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    v.push_back(std::stoi(s.substr(i, j - i)));
    i = j + 1;
  }
  return v;
}

Tensor random_device(cuda::CudaBackend& be, const Shape& shape, std::mt19937& rng) {
  Tensor h = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = d(rng);
  Tensor c = h.to(DType::kBF16);
  return be.upload(c.raw(), shape, DType::kBF16, {});
}

// A stream on a set of SMs: a green context's, or an ordinary one (sms = every SM).
struct Lane {
  cudaStream_t stream = nullptr;
  int sms = 0;
  CUgreenCtx green = nullptr;
  CUcontext ctx = nullptr;  // current while work is queued on the stream
};

// Runs fn with the lane's context current (a green context's stream takes work queued
// from its own context), then makes `home` current again.
void in_lane(const Lane& l, CUcontext home, const std::function<void()>& fn) {
  if (l.ctx != nullptr && l.ctx != home) OVERLAP_CU_CHECK(cuCtxSetCurrent(l.ctx));
  fn();
  if (l.ctx != nullptr && l.ctx != home) OVERLAP_CU_CHECK(cuCtxSetCurrent(home));
}

// Splits the device's SMs into a partition of `first` SMs and the rest.
std::pair<Lane, Lane> split_lanes(int first) {
  CUdevice dev;
  OVERLAP_CU_CHECK(cuDeviceGet(&dev, 0));
  CUdevResource all{};
  OVERLAP_CU_CHECK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource group{}, rest{};
  unsigned int n = 1;
  OVERLAP_CU_CHECK(
      cuDevSmResourceSplitByCount(&group, &n, &all, &rest, 0, static_cast<unsigned>(first)));
  if (n != 1) raise<Internal>("split into {} groups of {} SMs", n, first);
  auto make = [&](CUdevResource& r) {
    Lane l;
    CUdevResourceDesc desc;
    OVERLAP_CU_CHECK(cuDevResourceGenerateDesc(&desc, &r, 1));
    OVERLAP_CU_CHECK(cuGreenCtxCreate(&l.green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream s;
    OVERLAP_CU_CHECK(cuGreenCtxStreamCreate(&s, l.green, CU_STREAM_NON_BLOCKING, 0));
    l.stream = reinterpret_cast<cudaStream_t>(s);
    l.sms = static_cast<int>(r.sm.smCount);
    OVERLAP_CU_CHECK(cuCtxFromGreenCtx(&l.ctx, l.green));
    return l;
  };
  return {make(group), make(rest)};
}

void drop_lane(Lane& l) {
  if (l.green == nullptr) return;
  cudaStreamDestroy(l.stream);
  cuGreenCtxDestroy(l.green);
  l = Lane{};
}

struct Setup {
  bench::ModelDims d;
  int32_t seqs = 400, ctx = 1536, rows = 400, reps = 20;
};

int run(int argc, char** argv) {
  Setup su;
  std::string config_path;
  std::vector<int32_t> splits = {48, 64, 80, 96, 112};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) raise<InvalidArgument>("{} needs a value", a);
      return argv[++i];
    };
    if (a == "--config")
      config_path = next();
    else if (a == "--seqs")
      su.seqs = std::stoi(next());
    else if (a == "--ctx")
      su.ctx = std::stoi(next());
    else if (a == "--rows")
      su.rows = std::stoi(next());
    else if (a == "--reps")
      su.reps = std::stoi(next());
    else if (a == "--splits")
      splits = parse_list(next());
    else
      raise<InvalidArgument>("unknown argument '{}'", a);
  }
  if (!config_path.empty()) su.d = bench::model_dims(load_json_file(config_path));
  const auto& d = su.d;

  CudaBackendOptions o;
  o.dtype = DType::kBF16;
  cuda::CudaBackend be(o);
  OVERLAP_CU_CHECK(cuInit(0));
  std::mt19937 rng(7);
  const int32_t hd = static_cast<int32_t>(d.head_dim), nh = static_cast<int32_t>(d.heads),
                nkv = static_cast<int32_t>(d.kv_heads), bs = 16;

  // ---- attention: seqs decode queries over ctx keys each, random block tables ----
  const int32_t blocks_each = (su.ctx + bs - 1) / bs;
  const int64_t blocks = int64_t{su.seqs} * blocks_each;
  const double kv_bytes = 2.0 * su.seqs * su.ctx * nkv * hd * 2;
  const int copies = 2;  // each several times the L2
  const int64_t pattern_elems = int64_t{1} << 22;
  Tensor pattern = random_device(be, {pattern_elems}, rng);
  auto fill = [&](Tensor& t) {
    const int64_t bytes = t.numel() * 2, chunk = pattern_elems * 2;
    for (int64_t off = 0; off < bytes; off += chunk)
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(t.raw()) + off, pattern.raw(),
                                         static_cast<size_t>(std::min(chunk, bytes - off)),
                                         cudaMemcpyDeviceToDevice, be.stream()));
  };
  std::vector<Tensor> kc, vc;
  for (int c = 0; c < copies; ++c) {
    kc.push_back(be.alloc({blocks, nkv, bs, hd}, DType::kBF16));
    vc.push_back(be.alloc({blocks, nkv, bs, hd}, DType::kBF16));
    fill(kc.back());
    fill(vc.back());
  }
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> qs = {0}, lens(static_cast<size_t>(su.seqs), su.ctx);
  for (int32_t s = 0; s < su.seqs; ++s) qs.push_back(s + 1);
  Tensor qs_t = be.upload_i32(qs.data(), static_cast<int64_t>(qs.size()));
  Tensor lens_t = be.upload_i32(lens.data(), static_cast<int64_t>(lens.size()));
  Tensor tables_t = be.upload_i32(perm.data(), blocks);
  const QkvLayout layout{nh, nkv, hd};
  Tensor qkv_in = random_device(be, {su.seqs, layout.row_cols()}, rng);
  Tensor attn_out = be.alloc({su.seqs, layout.q_cols()}, DType::kBF16);
  Tensor err = be.alloc({1}, DType::kI32);
  be.fill_zero(err);
  const int64_t num_counters = int64_t{su.seqs} * nkv;
  Tensor counters = be.alloc({num_counters}, DType::kI32);
  be.fill_zero(counters);
  // Split partials (a plan for fewer SMs may split more); one buffer for every plan.
  Tensor attn_scratch = be.alloc({int64_t{512} << 20}, DType::kU8);
  auto attention = [&](int copy, int sms, cudaStream_t stream) {
    cuda::AttentionArgs a;
    a.qkv = qkv_in.raw();
    a.qkv_cols = layout.row_cols();
    a.tokens = su.seqs;
    a.k_cache = kc[static_cast<size_t>(copy)].raw();
    a.v_cache = vc[static_cast<size_t>(copy)].raw();
    a.out = attn_out.raw();
    a.type = DType::kBF16;
    a.query_start = qs_t.data<int32_t>();
    a.context_lens = lens_t.data<int32_t>();
    a.block_tables = tables_t.data<int32_t>();
    a.num_seqs = su.seqs;
    a.max_blocks = blocks_each;
    a.max_query_len = 1;
    a.max_context_len = su.ctx;
    a.num_blocks = static_cast<int32_t>(blocks);
    a.block_size = bs;
    a.heads = nh;
    a.kv_heads = nkv;
    a.head_dim = hd;
    a.scale = 1.f / std::sqrt(static_cast<float>(hd));
    a.err = err.data<int32_t>();
    const cuda::AttentionPlan plan = cuda::plan_attention_decode(a, sms);
    if (plan.scratch_bytes > attn_scratch.nbytes())
      raise<Internal>("decode attention wants {} bytes of scratch", plan.scratch_bytes);
    cuda::launch_attention_decode(a, plan, plan.scratch_bytes > 0 ? attn_scratch.raw() : nullptr,
                                  counters.data<int32_t>(), num_counters, stream);
    return plan;
  };

  // ---- products: one layer's four at `rows` rows ----
  struct Product {
    const char* name;
    int64_t n, k;
    Tensor w, x, y;
  };
  std::vector<Product> prods = {{"qkv", layout.row_cols(), d.hidden, {}, {}, {}},
                                {"o", d.hidden, d.heads * d.head_dim, {}, {}, {}},
                                {"gate_up", 2 * d.inter, d.hidden, {}, {}, {}},
                                {"down", d.hidden, d.inter, {}, {}, {}}};
  double gemm_flops = 0, weight_bytes = 0;
  for (Product& p : prods) {
    p.w = random_device(be, {p.n, p.k}, rng);
    p.x = random_device(be, {su.rows, p.k}, rng);
    p.y = be.alloc({su.rows, p.n}, DType::kBF16);
    gemm_flops += 2.0 * su.rows * p.n * p.k;
    weight_bytes += 2.0 * p.n * p.k;
  }
  Tensor workspace = be.alloc({int64_t{64} << 20}, DType::kU8);
  auto products = [&](cuda::Gemm& g) {
    for (Product& p : prods) {
      cuda::GemmArgs a;
      a.m = su.rows;
      a.n = p.n;
      a.k = p.k;
      a.x = p.x.raw();
      a.w = p.w.raw();
      a.y = p.y.raw();
      a.ldy = p.n;
      g.run(a);
    }
  };

  // References on the whole GPU (the backend's stream).
  cuda::Gemm full_gemm(be.stream(), workspace.raw(), workspace.nbytes());
  attention(0, be.num_sms(), be.stream());
  products(full_gemm);  // tunes the algorithms
  be.synchronize();
  const std::vector<float> attn_ref = bench::bf16_values(be, attn_out);
  std::vector<std::vector<float>> prod_ref;
  for (Product& p : prods) prod_ref.push_back(bench::bf16_values(be, p.y));
  auto check = [&](const char* what) {
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
    double worst = bench::rel_error(bench::bf16_values(be, attn_out), attn_ref);
    for (size_t i = 0; i < prods.size(); ++i)
      worst = std::max(worst, bench::rel_error(bench::bf16_values(be, prods[i].y), prod_ref[i]));
    std::printf("  check %-28s max relative error vs the whole GPU %.2e%s\n", what, worst,
                worst > 1e-2 ? "  <-- MISMATCH" : "");
    return worst;
  };

  CUcontext home = nullptr;
  OVERLAP_CU_CHECK(cuCtxGetCurrent(&home));
  using Clock = std::chrono::steady_clock;
  // Queues `reps` rounds of fa on lane a and fb on lane b (either may be empty),
  // interleaved, from idle streams, and returns the host's wall time per round in ms
  // until both are done (median of 4 trials after one warm-up). Host time: events do not
  // cross green contexts, and a round (~1 ms) is long beside the launches' cost, which
  // overlaps the device's work anyway.
  auto timed = [&](const Lane& a, const std::function<void(int)>& fa, const Lane& b,
                   const std::function<void(int)>& fb) {
    std::vector<double> t;
    for (int trial = 0; trial < 5; ++trial) {
      TACHYON_CUDA_CHECK(cudaStreamSynchronize(a.stream));
      TACHYON_CUDA_CHECK(cudaStreamSynchronize(b.stream));
      const auto t0 = Clock::now();
      for (int r = 0; r < su.reps; ++r) {
        if (fa) in_lane(a, home, [&] { fa(r); });
        if (fb) in_lane(b, home, [&] { fb(r); });
      }
      TACHYON_CUDA_CHECK(cudaStreamSynchronize(a.stream));
      TACHYON_CUDA_CHECK(cudaStreamSynchronize(b.stream));
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (trial > 0) t.push_back(ms / su.reps);
    }
    return bench::median(t);
  };

  std::printf(
      "decode attention: %d sequences x %d keys (%d heads, %d KV heads, head_dim %d), %.2f GB "
      "of K/V a call; products: %d rows x (qkv, o, gate_up, down), %.1f GFLOP, %.0f MB of "
      "weights; %d SMs; %d rounds a trial, median of 4 trials\n",
      su.seqs, su.ctx, nh, nkv, hd, kv_bytes / 1e9, su.rows, gemm_flops / 1e9, weight_bytes / 1e6,
      be.num_sms(), su.reps);

  Lane l0, l1;
  l0.stream = be.stream();
  l0.sms = be.num_sms();
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&l1.stream, cudaStreamNonBlocking));
  l1.sms = be.num_sms();
  Tensor workspace_b = be.alloc({int64_t{64} << 20}, DType::kU8);
  cuda::Gemm side_gemm(l1.stream, workspace_b.raw(), workspace_b.nbytes());
  products(side_gemm);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());

  // Whole GPU: each alone, one after the other on one stream, and on two streams at once.
  const int full = be.num_sms();
  auto attn_on = [&](const Lane& l) {
    return [&, l](int r) { attention(r % copies, l.sms, l.stream); };
  };
  const double attn_full = timed(l0, attn_on(l0), l1, {});
  const double prod_full = timed(l0, [&](int) { products(full_gemm); }, l1, {});
  const double seq_full = timed(l0,
                                [&](int r) {
                                  attention(r % copies, full, l0.stream);
                                  products(full_gemm);
                                },
                                l1, {});
  const double two_streams = timed(l0, attn_on(l0), l1, [&](int) { products(side_gemm); });
  check("two streams");
  std::printf("\n%-34s %9s %9s %9s\n", "setting", "ms/round", "TB/s", "TFLOP/s");
  std::printf("%-34s %9.3f %9.2f %9s\n", "attention alone, all SMs", attn_full,
              kv_bytes / attn_full / 1e9, "-");
  std::printf("%-34s %9.3f %9s %9.0f\n", "products alone, all SMs", prod_full, "-",
              gemm_flops / prod_full / 1e9);
  std::printf("%-34s %9.3f\n", "both, one stream (sequential)", seq_full);
  std::printf("%-34s %9.3f\n", "both, two streams", two_streams);
  std::printf("RESULT full attn_ms %.4f prod_ms %.4f seq_ms %.4f two_streams_ms %.4f\n", attn_full,
              prod_full, seq_full, two_streams);

  std::printf("\n%-10s %-10s %10s %8s %10s %8s %11s %11s %8s\n", "attn SMs", "prod SMs", "attn ms",
              "TB/s", "prod ms", "TFLOP/s", "together ms", "seq ms", "gain");
  for (int32_t a_sms : splits) {
    Lane la, lb;
    try {
      std::tie(la, lb) = split_lanes(a_sms);
    } catch (const std::exception& e) {
      std::printf("%-10d split failed: %s\n", a_sms, e.what());
      continue;
    }
    // The products' own cuBLASLt handle, events and workspace, made in their context (the
    // algorithms are tuned again there, on that partition).
    Tensor workspace_p = be.alloc({int64_t{64} << 20}, DType::kU8);
    std::unique_ptr<cuda::Gemm> gemm_b;
    in_lane(lb, home, [&] {
      gemm_b = std::make_unique<cuda::Gemm>(lb.stream, workspace_p.raw(), workspace_p.nbytes());
      products(*gemm_b);
    });
    in_lane(la, home, [&] { attention(0, la.sms, la.stream); });
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(la.stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(lb.stream));
    const double attn_p = timed(la, attn_on(la), lb, {});
    const double prod_p = timed(lb, [&](int) { products(*gemm_b); }, la, {});
    const double t = timed(la, attn_on(la), lb, [&](int) { products(*gemm_b); });
    std::printf("%-10d %-10d %10.3f %8.2f %10.3f %8.0f %11.3f %11.3f %7.1f%%\n", la.sms, lb.sms,
                attn_p, kv_bytes / attn_p / 1e9, prod_p, gemm_flops / prod_p / 1e9, t, seq_full,
                100.0 * (seq_full - t) / seq_full);
    std::printf(
        "RESULT split attn_sms %d prod_sms %d attn_ms %.4f prod_ms %.4f together_ms %.4f "
        "seq_ms %.4f\n",
        la.sms, lb.sms, attn_p, prod_p, t, seq_full);
    check("partitioned");
    in_lane(lb, home, [&] { gemm_b.reset(); });
    drop_lane(la);
    drop_lane(lb);
  }
  TACHYON_CUDA_CHECK(cudaStreamDestroy(l1.stream));
  return 0;
}

}  // namespace
}  // namespace tachyon

int main(int argc, char** argv) {
  try {
    return tachyon::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tachyon_overlap_bench: %s\n", e.what());
    return 1;
  }
}
