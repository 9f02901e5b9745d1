// The decoder benchmark's single ops on the GPU (tachyon_gpu_bench's op breakdown and
// --attn-only): GEMMs against the machine's ceilings, attention through every kernel,
// and decode attention timed on the device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "core/error.h"

#include "gpu_decoder_bench.h"
#include "model_dims.h"

namespace tachyon::decoder_bench {
namespace {

// Median seconds of fn() over reps runs after 2 warm-ups, waiting for the device.
template <typename Fn>
double time_op(Backend& be, int reps, Fn fn) {
  std::vector<double> t;
  for (int r = 0; r < reps + 2; ++r) {
    be.synchronize();
    const double a = now_s();
    fn();
    be.synchronize();
    if (r >= 2) t.push_back(now_s() - a);
  }
  return median(t);
}

Tensor random_device(cuda::CudaBackend& be, const Shape& shape, DType dtype, std::mt19937& rng) {
  Tensor h = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = d(rng);
  Tensor c = dtype == DType::kF32 ? h : h.to(dtype);
  return be.upload(c.raw(), shape, dtype, {});
}

// Single ops at the benchmark model's shapes, against the machine's ceilings: GEMM
// FLOP/s and bytes/s (weights read once).
void gemm_ops(cuda::CudaBackend& be, DType dtype, const Dims& dm, std::mt19937& rng) {
  const int64_t qkv_n = (dm.heads + 2 * dm.kv_heads) * dm.head_dim;
  struct Nk {
    const char* name;
    int64_t n, k;
  };
  for (Nk nk : {Nk{"qkv", qkv_n, dm.hidden}, Nk{"o", dm.hidden, dm.heads * dm.head_dim},
                Nk{"gate_up", 2 * dm.inter, dm.hidden}, Nk{"down", dm.hidden, dm.inter},
                Nk{"lm_head", dm.vocab, dm.hidden}}) {
    const int64_t n = nk.n, k = nk.k;
    Tensor w = random_device(be, {n, k}, dtype, rng);
    for (int64_t m : {1, 64, 1024, 8192}) {
      Tensor x = random_device(be, {m, k}, dtype, rng);
      Tensor y = be.alloc({m, n}, dtype);
      // (Rows within the matrix-vector kernel's reach run on it.)
      const double t =
          time_op(be, 20, [&] { be.linear(x, w, Tensor(), y, 0, Activation::kIdentity); });
      const double flops = 2.0 * m * n * k;
      const double bytes = dtype_size(dtype) * double(m * k + n * k + m * n);
      const char* how = m > cuda::kGemvAutoRows ? "" : "_gemv";
      std::printf("gemm %-8s %5lld x %6lld x %5lld %-7s   %10.4f %7.1f TFLOP/s %6.0f GB/s\n",
                  nk.name, static_cast<long long>(m), static_cast<long long>(n),
                  static_cast<long long>(k), how, t * 1e3, flops / t / 1e12, bytes / t / 1e9);
      std::printf("RESULT gemm_%s_m%lld%s_us %.2f tflops %.1f gbs %.0f\n", nk.name,
                  static_cast<long long>(m), how, t * 1e6, flops / t / 1e12, bytes / t / 1e9);
    }
  }
}

// Attention through every kernel that applies, at prefill and decode shapes.
void attention_ops(cuda::CudaBackend& be, DType dtype, const Dims& dm, std::mt19937& rng) {
  const int32_t hd = static_cast<int32_t>(dm.head_dim);
  const int32_t nh = static_cast<int32_t>(dm.heads), nkv = static_cast<int32_t>(dm.kv_heads);
  const QkvLayout layout{nh, nkv, hd};
  using K = cuda::CudaBackend::AttentionKernel;
  struct Shape2 {
    int32_t seqs, q_len, ctx;
  };
  for (Shape2 sh :
       {Shape2{1, 1024, 1024}, Shape2{8, 1024, 1024}, Shape2{1, 4096, 4096}, Shape2{1, 1, 1024},
        Shape2{64, 1, 1024}, Shape2{8, 1, 4096}, Shape2{1, 1, 32768}}) {
    const int32_t bs = 16, blocks_each = (sh.ctx + bs - 1) / bs;
    const int64_t T = int64_t{sh.seqs} * sh.q_len;
    LayerKvCache cache{random_device(be, {sh.seqs * blocks_each, nkv, bs, hd}, dtype, rng),
                       random_device(be, {sh.seqs * blocks_each, nkv, bs, hd}, dtype, rng)};
    Tensor qkv = random_device(be, {T, layout.row_cols()}, dtype, rng);
    std::vector<int32_t> qs = {0}, ctx, tables;
    for (int32_t s = 0; s < sh.seqs; ++s) {
      qs.push_back(qs.back() + sh.q_len);
      ctx.push_back(sh.ctx);
      for (int32_t i = 0; i < blocks_each; ++i) tables.push_back(s * blocks_each + i);
    }
    AttentionMeta meta;
    meta.query_start = be.upload_i32(qs.data(), static_cast<int64_t>(qs.size()));
    meta.context_lens = be.upload_i32(ctx.data(), static_cast<int64_t>(ctx.size()));
    meta.block_tables = be.upload_i32(tables.data(), static_cast<int64_t>(tables.size()));
    meta.num_seqs = sh.seqs;
    meta.max_blocks_per_seq = blocks_each;
    meta.max_query_len = sh.q_len;
    meta.max_context_len = sh.ctx;
    AttentionParams p;
    p.scale = 1.f / std::sqrt(static_cast<float>(hd));
    Tensor out = be.alloc({T, layout.q_cols()}, dtype);
    // Causal pairs (query, key) and the K/V bytes read once.
    double pairs = 0;
    for (int32_t i = 0; i < sh.q_len; ++i) pairs += sh.ctx - sh.q_len + i + 1;
    pairs *= sh.seqs;
    const double flops = 4.0 * pairs * nh * hd;
    const double kv_bytes = 2.0 * sh.seqs * sh.ctx * nkv * hd * dtype_size(dtype);
    meta.host_query_start = &qs;
    meta.host_context_lens = &ctx;
    for (K kern : {K::kSimple, K::kDecode, K::kFlash}) {
      if (kern == K::kDecode && sh.q_len > 1) continue;
      be.set_attention_kernel(kern);
      be.attention(qkv, layout, cache, meta, p, out);
      if (be.last_attention_kernel() != kern) continue;
      // Several calls back to back per timed run, as a model's layers issue them: a
      // kernel of tens of microseconds is not hidden behind the launch and the wait.
      constexpr int kCalls = 8;
      const double t = time_op(be, 10,
                               [&] {
                                 for (int c = 0; c < kCalls; ++c)
                                   be.attention(qkv, layout, cache, meta, p, out);
                               }) /
                       kCalls;
      const char* kname = kern == K::kDecode ? "decode" : kern == K::kFlash ? "flash" : "simple";
      std::printf("attention %-6s %3d seqs x %5d q, ctx %6d     %10.4f %7.1f TFLOP/s %6.0f GB/s\n",
                  kname, sh.seqs, sh.q_len, sh.ctx, t * 1e3, flops / t / 1e12, kv_bytes / t / 1e9);
      std::printf("RESULT attn_%s_%dx%d_ctx%d_us %.2f tflops %.2f gbs %.0f\n", kname, sh.seqs,
                  sh.q_len, sh.ctx, t * 1e6, flops / t / 1e12, kv_bytes / t / 1e9);
    }
  }
}

// The single ops of the two above (only attention's: gemms false).
}  // namespace

void op_breakdown(DType dtype, const Dims& dm, bool gemms) {
  CudaBackendOptions o;
  o.dtype = dtype;
  cuda::CudaBackend be(o);
  std::mt19937 rng(3);
  std::printf("\n%-46s %10s %12s\n", "op", "ms", "rate");
  if (gemms) gemm_ops(be, dtype, dm, rng);
  attention_ops(be, dtype, dm, rng);
}

// Decode attention alone, timed on the device (gpu_decoder_bench.h).
void decode_attention_bench(DType dtype, const Dims& dm, std::vector<AttnShape> shapes) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return;
  // TACHYON_KV_CACHE_DTYPE=fp8: the caches in e4m3, as the step benchmark's model does.
  const char* kv_env = std::getenv("TACHYON_KV_CACHE_DTYPE");
  const bool kv_fp8 = kv_env != nullptr && std::string(kv_env) == "fp8";
  const DType kv_dtype = kv_fp8 ? DType::kF8E4M3 : dtype;
  CudaBackendOptions o;
  o.dtype = dtype;
  o.kv_dtype = kv_dtype;
  cuda::CudaBackend be(o);
  using K = cuda::CudaBackend::AttentionKernel;
  constexpr int kCalls = 50, kReps = 5;
  constexpr double kRotateBytes = 512e6;
  const int32_t hd = static_cast<int32_t>(dm.head_dim);
  const int32_t nh = static_cast<int32_t>(dm.heads), nkv = static_cast<int32_t>(dm.kv_heads);
  const QkvLayout layout{nh, nkv, hd};
  const int64_t es = static_cast<int64_t>(dtype_size(kv_dtype));
  std::mt19937 rng(5);
  // Random values copied over every cache (drawing gigabytes on the host takes minutes).
  const int64_t pattern_elems = int64_t{1} << 22;
  Tensor pattern;
  if (kv_fp8) {
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<uint8_t> bytes(static_cast<size_t>(pattern_elems));
    for (uint8_t& b : bytes) b = f32_to_e4m3(d(rng));
    pattern = be.upload(bytes.data(), {pattern_elems}, kv_dtype, {});
  } else {
    pattern = random_device(be, {pattern_elems}, dtype, rng);
  }
  auto fill = [&](Tensor& t) {
    const int64_t bytes = t.numel() * es, chunk = pattern_elems * es;
    for (int64_t off = 0; off < bytes; off += chunk)
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(t.raw()) + off, pattern.raw(),
                                         static_cast<size_t>(std::min(chunk, bytes - off)),
                                         cudaMemcpyDeviceToDevice, be.stream()));
  };
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  TACHYON_CUDA_CHECK(cudaEventCreate(&e0));
  TACHYON_CUDA_CHECK(cudaEventCreate(&e1));
  std::printf(
      "\ndecode attention on the device (%d heads, %d KV heads, head_dim %d, %s, %s cache)\n", nh,
      nkv, hd, std::string(dtype_name(dtype)).c_str(), std::string(dtype_name(kv_dtype)).c_str());
  std::printf("%-22s %10s %9s %8s %7s\n", "seqs x ctx", "us", "TB/s", "splits", "caches");
  if (shapes.empty())
    shapes = {{64, 1024}, {128, 1024}, {256, 2048}, {8, 4096}, {1, 32768}, {1, 1024}};
  for (const AttnShape& sh : shapes) {
    const int32_t bs = 16, blocks_each = (sh.ctx + bs - 1) / bs;
    const int64_t blocks = int64_t{sh.seqs} * blocks_each;
    const double kv_bytes = 2.0 * sh.seqs * sh.ctx * nkv * hd * es;
    const int copies = static_cast<int>(
        std::clamp<double>(std::ceil(kRotateBytes / kv_bytes), 2.0, double{kCalls}));
    std::vector<LayerKvCache> caches(static_cast<size_t>(copies));
    for (LayerKvCache& c : caches) {
      c.k = be.alloc({blocks, nkv, bs, hd}, kv_dtype);
      c.v = be.alloc({blocks, nkv, bs, hd}, kv_dtype);
      fill(c.k);
      fill(c.v);
    }
    std::vector<int32_t> perm(static_cast<size_t>(blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> qs = {0}, ctx(static_cast<size_t>(sh.seqs), sh.ctx);
    for (int32_t s = 0; s < sh.seqs; ++s) qs.push_back(s + 1);
    AttentionMeta meta;
    meta.query_start = be.upload_i32(qs.data(), static_cast<int64_t>(qs.size()));
    meta.context_lens = be.upload_i32(ctx.data(), static_cast<int64_t>(ctx.size()));
    meta.block_tables = be.upload_i32(perm.data(), blocks);
    meta.num_seqs = sh.seqs;
    meta.max_blocks_per_seq = blocks_each;
    meta.max_query_len = 1;
    meta.max_context_len = sh.ctx;
    meta.host_query_start = &qs;
    meta.host_context_lens = &ctx;
    AttentionParams p;
    p.scale = 1.f / std::sqrt(static_cast<float>(hd));
    Tensor qkv = random_device(be, {sh.seqs, layout.row_cols()}, dtype, rng);
    Tensor out = be.alloc({sh.seqs, layout.q_cols()}, dtype);
    be.set_attention_kernel(K::kDecode);
    for (const LayerKvCache& c : caches) be.attention(qkv, layout, c, meta, p, out);
    be.synchronize();
    if (be.last_attention_kernel() != K::kDecode) {
      std::printf("%4d x %-15d the decode kernel does not apply\n", sh.seqs, sh.ctx);
      continue;
    }
    std::unique_ptr<DeviceGraph> graph = be.record([&] {
      for (int i = 0; i < kCalls; ++i) be.attention(qkv, layout, caches[i % copies], meta, p, out);
    });
    if (!graph || !graph->replay()) {
      std::printf("%4d x %-15d recording the graph failed\n", sh.seqs, sh.ctx);
      continue;
    }
    be.synchronize();
    TACHYON_CUDA_CHECK(cudaEventRecord(e0, be.stream()));
    for (int r = 0; r < kReps; ++r) graph->replay();
    TACHYON_CUDA_CHECK(cudaEventRecord(e1, be.stream()));
    TACHYON_CUDA_CHECK(cudaEventSynchronize(e1));
    be.synchronize();
    float ms = 0.f;
    TACHYON_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1e3 * ms / (kReps * kCalls);
    cuda::AttentionArgs a;
    a.type = dtype;
    a.heads = nh;
    a.kv_heads = nkv;
    a.head_dim = hd;
    a.block_size = bs;
    a.num_seqs = sh.seqs;
    a.tokens = sh.seqs;
    a.max_query_len = 1;
    a.max_context_len = sh.ctx;
    a.kv_fp8 = kv_fp8;
    const cuda::AttentionPlan plan = cuda::plan_attention_decode(a, be.num_sms());
    std::printf("%4d x %-15d %10.2f %9.3f %8d %7d\n", sh.seqs, sh.ctx, us, kv_bytes / us / 1e6,
                plan.num_splits, copies);
    std::printf("RESULT decode_attn_%dx%d_us %.2f tbs %.3f splits %d\n", sh.seqs, sh.ctx, us,
                kv_bytes / us / 1e6, plan.num_splits);
  }
  be.set_attention_kernel(K::kAuto);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace tachyon::decoder_bench
