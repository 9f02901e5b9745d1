// End-to-end step timings of the decoder on the GPU: a random Llama-shaped checkpoint
// (written through make-random's code, loaded through the public path), then
//   prefill: tokens/s for one step of S sequences x L prompt tokens;
//   decode:  step time for B sequences advancing one token each at context ~C.
// Each figure is the median of repeated steps after warm-up, timed on the host around
// LanguageModel::forward (which includes the metadata upload, every kernel and the
// logits download), i.e. what the engine sees.
//
// Usage: tachyon_gpu_bench [--config CONFIG.json] [--dtype bf16|f16|f32] [--quick]
//                          [--dir WORKDIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/loader.h"
#include "model/random_model.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;

// About 1.1B parameters: Llama-3.2-1B's shape with a 32000-token vocabulary.
constexpr const char* kDefaultConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
  "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
  "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "bfloat16"
})";

constexpr int32_t kBlock = 16;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Seqs {
  int32_t count = 0;
  int32_t blocks_each = 0;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> computed;
};

// One step advancing sequence s by n[s] tokens (logits for each one's last token).
ForwardBatch make_batch(const Seqs& q, const std::vector<int32_t>& n) {
  ForwardBatch b;
  b.query_start = {0};
  b.max_blocks_per_seq = q.blocks_each;
  for (int32_t s = 0; s < q.count; ++s) {
    for (int32_t i = 0; i < n[s]; ++i) {
      b.token_ids.push_back(q.tokens[s][q.computed[s] + i]);
      b.positions.push_back(q.computed[s] + i);
    }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(q.computed[s] + n[s]);
    b.logits_rows.push_back(b.query_start.back() - 1);
    for (int32_t i = 0; i < q.blocks_each; ++i) b.block_tables.push_back(s * q.blocks_each + i);
  }
  return b;
}

Seqs make_seqs(int32_t count, int32_t max_len, int32_t vocab, std::mt19937& rng) {
  Seqs q;
  q.count = count;
  q.blocks_each = (max_len + kBlock - 1) / kBlock;
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
  q.tokens.resize(static_cast<size_t>(count));
  for (auto& t : q.tokens) {
    t.resize(static_cast<size_t>(max_len));
    for (auto& x : t) x = tok(rng);
  }
  q.computed.assign(static_cast<size_t>(count), 0);
  return q;
}

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

// Single ops at the benchmark model's shapes (hidden 2048, 32 heads of 64, 8 KV heads,
// MLP 8192), against the machine's ceilings: bf16 GEMM FLOP/s and attention.
void op_breakdown(DType dtype) {
  CudaBackendOptions o;
  o.dtype = dtype;
  cuda::CudaBackend be(o);
  std::mt19937 rng(3);
  std::printf("\n%-46s %10s %12s\n", "op", "ms", "rate");
  for (int64_t m : {1, 64, 1024, 8192}) {
    const int64_t k = 2048, n = 8192;
    Tensor x = random_device(be, {m, k}, dtype, rng);
    Tensor w = random_device(be, {n, k}, dtype, rng);
    Tensor y = be.alloc({m, n}, dtype);
    const double t =
        time_op(be, 20, [&] { be.linear(x, w, Tensor(), y, 0, Activation::kIdentity); });
    const double flops = 2.0 * m * n * k, bytes = 2.0 * (m * k + n * k + m * n);
    std::printf("gemm %5lld x %5lld x %5lld                     %10.4f %7.1f TFLOP/s %6.0f GB/s\n",
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                t * 1e3, flops / t / 1e12, bytes / t / 1e9);
  }
  const QkvLayout layout{32, 8, 64};
  using K = cuda::CudaBackend::AttentionKernel;
  struct Shape2 {
    int32_t seqs, q_len, ctx;
  };
  for (Shape2 sh : {Shape2{1, 1024, 1024}, Shape2{1, 4096, 4096}, Shape2{64, 1, 512},
                    Shape2{8, 1, 4096}, Shape2{1, 1, 32768}}) {
    const int32_t bs = 16, blocks_each = (sh.ctx + bs - 1) / bs;
    const int64_t T = int64_t{sh.seqs} * sh.q_len;
    LayerKvCache cache{random_device(be, {sh.seqs * blocks_each, 8, bs, 64}, dtype, rng),
                       random_device(be, {sh.seqs * blocks_each, 8, bs, 64}, dtype, rng)};
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
    p.scale = 0.125f;
    Tensor out = be.alloc({T, layout.q_cols()}, dtype);
    // Causal pairs (query, key) and the K/V bytes read once.
    double pairs = 0;
    for (int32_t i = 0; i < sh.q_len; ++i) pairs += sh.ctx - sh.q_len + i + 1;
    pairs *= sh.seqs;
    const double flops = 4.0 * pairs * 32 * 64;
    const double kv_bytes = 2.0 * sh.seqs * sh.ctx * 8 * 64 * dtype_size(dtype);
    for (K kern : {K::kSimple, K::kMma}) {
      be.set_attention_kernel(kern);
      be.attention(qkv, layout, cache, meta, p, out);
      if (be.last_attention_kernel() != kern) continue;
      const double t = time_op(be, 10, [&] { be.attention(qkv, layout, cache, meta, p, out); });
      std::printf("attention %-6s %3d seqs x %5d q, ctx %6d     %10.4f %7.1f TFLOP/s %6.0f GB/s\n",
                  kern == K::kMma ? "mma" : "simple", sh.seqs, sh.q_len, sh.ctx, t * 1e3,
                  flops / t / 1e12, kv_bytes / t / 1e9);
    }
  }
}

int run(int argc, char** argv) {
  std::string config_path, dir = (fs::temp_directory_path() / "tachyon_gpu_bench").string();
  std::string dtype_name_s = "bf16";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      config_path = argv[++i];
    else if (a == "--dtype" && i + 1 < argc)
      dtype_name_s = argv[++i];
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--quick")
      quick = true;
    else
      raise<InvalidArgument>("unknown argument '{}'", a);
  }
  const auto dtype = parse_dtype(dtype_name_s);
  if (!dtype) raise<InvalidArgument>("--dtype: unknown dtype '{}'", dtype_name_s);
  fs::create_directories(dir);
  if (config_path.empty()) {
    config_path = dir + "/bench_config.json";
    std::ofstream(config_path) << kDefaultConfig;
  }
  const std::string model_dir = dir + "/model";
  double t0 = now_s();
  RandomModelOptions ro;
  ro.dtype = DType::kBF16;
  const uint64_t params = write_random_model(config_path, model_dir, ro);
  std::printf("random checkpoint: %.3f B parameters, written in %.1f s\n", params / 1e9,
              now_s() - t0);
  t0 = now_s();
  LoadOptions lo;
  lo.device = Device{DeviceType::kCUDA, 0};
  lo.dtype = *dtype;
  auto model = load_model(model_dir, lo);
  const auto mem = model->backend().memory_info();
  std::printf("loaded on the GPU in %.1f s (%s); device memory %.1f GiB free of %.1f GiB\n",
              now_s() - t0, dtype_name_s.c_str(), mem.free_bytes / double(1 << 30),
              mem.total_bytes / double(1 << 30));
  const int64_t budget = kv_cache_budget_bytes(*model, 0.9, 8192);
  std::printf(
      "KV cache budget at --gpu-memory-fraction 0.9: %.1f GiB = %lld blocks of %d tokens\n",
      budget / double(1 << 30),
      static_cast<long long>(budget / static_cast<int64_t>(model->kv_bytes_per_block(kBlock))),
      kBlock);

  const int32_t vocab = model->vocab_size();
  std::mt19937 rng(1);
  const int reps = quick ? 3 : 7;
  const std::vector<std::pair<int32_t, int32_t>> prefills = {
      {1, 128}, {1, 1024}, {8, 512}, {4, 2048}};
  const std::vector<int32_t> batches =
      quick ? std::vector<int32_t>{1, 32} : std::vector<int32_t>{1, 8, 32, 64, 128};
  const int32_t decode_ctx = 512, decode_steps = quick ? 8 : 24;
  // Enough blocks for the largest figure.
  int32_t need = 0;
  for (auto [s, l] : prefills) need = std::max(need, s * ((l + kBlock - 1) / kBlock));
  for (int32_t b : batches)
    need = std::max(need, b * ((decode_ctx + decode_steps + 8 + kBlock - 1) / kBlock));
  model->init_kv_cache(need, kBlock);

  std::printf("\n%-34s %12s %14s\n", "figure", "step ms", "tokens/s");
  for (auto [s, l] : prefills) {
    Seqs q = make_seqs(s, l, vocab, rng);
    std::vector<double> times;
    for (int r = 0; r < reps + 2; ++r) {
      std::fill(q.computed.begin(), q.computed.end(), 0);
      ForwardBatch b = make_batch(q, std::vector<int32_t>(static_cast<size_t>(s), l));
      const double a = now_s();
      model->forward(b);
      if (r >= 2) times.push_back(now_s() - a);
    }
    const double t = median(times);
    std::printf("prefill %3d x %-5d               %12.3f %14.0f\n", s, l, t * 1e3, s * l / t);
  }
  for (int32_t bsz : batches) {
    Seqs q = make_seqs(bsz, decode_ctx + decode_steps + 8, vocab, rng);
    // Fill the context in prefill steps of at most 8192 tokens.
    for (int32_t s0 = 0; s0 < bsz;) {
      const int32_t take = std::max(1, std::min(bsz - s0, 8192 / decode_ctx));
      // A batch over the chosen sequences only, on their own blocks.
      Seqs sub;
      sub.count = take;
      sub.blocks_each = q.blocks_each;
      for (int32_t s = s0; s < s0 + take; ++s) {
        sub.tokens.push_back(q.tokens[s]);
        sub.computed.push_back(0);
      }
      ForwardBatch b = make_batch(sub, std::vector<int32_t>(static_cast<size_t>(take), decode_ctx));
      for (int32_t s = 0; s < take; ++s)
        for (int32_t i = 0; i < q.blocks_each; ++i)
          b.block_tables[s * q.blocks_each + i] = (s0 + s) * q.blocks_each + i;
      model->forward(b);
      for (int32_t s = s0; s < s0 + take; ++s) q.computed[s] = decode_ctx;
      s0 += take;
    }
    std::vector<double> times;
    const std::vector<int32_t> one(static_cast<size_t>(bsz), 1);
    for (int32_t step = 0; step < decode_steps; ++step) {
      ForwardBatch b = make_batch(q, one);
      const double a = now_s();
      model->forward(b);
      if (step >= 3) times.push_back(now_s() - a);
      for (auto& c : q.computed) ++c;
    }
    const double t = median(times);
    std::printf("decode batch %-4d ctx %-5d         %12.3f %14.0f\n", bsz, decode_ctx, t * 1e3,
                bsz / t);
  }
  fs::remove_all(model_dir);
  op_breakdown(*dtype);
  return 0;
}

}  // namespace
}  // namespace tachyon

int main(int argc, char** argv) {
  try {
    return tachyon::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tachyon_gpu_bench: %s\n", e.what());
    return 1;
  }
}
