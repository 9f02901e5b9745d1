// The bundled trained model (models/tiny-kjv-chat, a Llama with a 32000-token
// vocabulary) on the GPU against transformers' float32 greedy generations
// (tests/engine/data/kjv_reference.json):
// - in f32 on the GPU, greedy decoding through the paged cache gives the reference
//   tokens exactly;
// - in bf16 and f16, the logits of the reference path (teacher-forced, one prefill)
//   stay within a relative tolerance of the f32 GPU logits, the argmax is the reference
//   token wherever the f32 margin exceeds the measured error, and free-running greedy
//   decoding matches the reference up to the first near tie at that precision;
// - an fp8 (e4m3) KV cache against the 16-bit cache on a random Llama-shaped model
//   with head_dim 128 (the bundled model's 32 is below what the fp8 path takes): the
//   prefill's attention reads staged blocks, the decode steps e4m3;
// - on the same model, a 700-token prefill with the gated wgmma GEMM and without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"
#include "core/json.h"
#include "model/loader.h"
#include "model/random_model.h"

namespace tachyon::cuda_test {
namespace {

constexpr int32_t kBlock = 16;

struct KjvCase {
  std::string prompt;
  std::vector<int32_t> prompt_ids, greedy;
};

std::vector<KjvCase> kjv_cases() {
  const Json ref =
      load_json_file(std::string(TACHYON_SOURCE_DIR) + "/tests/engine/data/kjv_reference.json");
  std::vector<KjvCase> out;
  for (const Json& c : ref["models"]["tiny-kjv-chat"])
    out.push_back({c["prompt"].get<std::string>(), c["prompt_ids"].get<std::vector<int32_t>>(),
                   c["greedy"][0].get<std::vector<int32_t>>()});
  return out;
}

// (The backend folds the RMS norms into the products that read them.)
std::unique_ptr<Model> load_kjv(DType dtype) {
  LoadOptions o;
  o.device = Device{DeviceType::kCUDA, 0};
  o.dtype = dtype;
  auto m = load_model(std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat", o);
  m->init_kv_cache(96, kBlock);
  return m;
}

// One forward over tokens[computed:] of one sequence on blocks 95, 94, ... (reversed,
// to exercise the block table); logits of the rows asked for.
Tensor run_step(Model& m, const std::vector<int32_t>& tokens, int32_t computed,
                std::vector<int32_t> rows, int32_t cache_blocks = 96) {
  ForwardBatch b;
  const int32_t n = static_cast<int32_t>(tokens.size()) - computed;
  for (int32_t i = 0; i < n; ++i) {
    b.token_ids.push_back(tokens[computed + i]);
    b.positions.push_back(computed + i);
  }
  b.query_start = {0, n};
  b.context_lens = {computed + n};
  b.max_blocks_per_seq = (computed + n + kBlock - 1) / kBlock;
  for (int32_t i = 0; i < b.max_blocks_per_seq; ++i) b.block_tables.push_back(cache_blocks - 1 - i);
  b.logits_rows = std::move(rows);
  return m.forward(b);
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<double> margins;  // top-1 minus top-2 at each step
};

Greedy greedy(Model& m, const KjvCase& c, int32_t eos) {
  Greedy g;
  std::vector<int32_t> tokens = c.prompt_ids;
  int32_t computed = 0;
  const int64_t vocab = m.vocab_size();
  while (g.tokens.size() < c.greedy.size()) {
    const int32_t n = static_cast<int32_t>(tokens.size()) - computed;
    Tensor l = run_step(m, tokens, computed, {n - 1});
    computed += n;
    const float* p = l.data<float>();
    const int32_t next = static_cast<int32_t>(std::max_element(p, p + vocab) - p);
    std::vector<float> sorted(p, p + vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    g.tokens.push_back(next);
    g.margins.push_back(double{sorted[0]} - sorted[1]);
    if (next == eos) break;
    tokens.push_back(next);
  }
  return g;
}

// With the norms folded into the products (prepare_input_norm): transformers' greedy tokens.
TEST(CudaModel, KjvF32GreedyMatchesTransformers) {
  TACHYON_REQUIRE_GPU();
  auto m = load_kjv(DType::kF32);
  const int32_t eos = static_cast<int32_t>(m->config().eos_token_ids.at(0));
  for (const KjvCase& c : kjv_cases())
    EXPECT_EQ(greedy(*m, c, eos).tokens, c.greedy) << "prompt: " << c.prompt;
}

// forward()'s logits come back in the decoder's pooled host buffers: a result the caller
// still holds is never written by later steps (its bytes stay as they were), and each
// result holds its own step's logits, also when earlier buffers were dropped for reuse
// (all rows of a prompt, then one row; recomputed logits may come from other GEMM
// configurations, hence a tolerance there).
TEST(CudaModel, ForwardResultsAreTheCallers) {
  TACHYON_REQUIRE_GPU();
  auto m = load_kjv(DType::kF32);
  const std::vector<KjvCase> cases = kjv_cases();
  ASSERT_GE(cases.size(), 2u);
  auto all_rows = [](const std::vector<int32_t>& ids) {
    std::vector<int32_t> r(ids.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<int32_t>(i);
    return r;
  };
  auto values = [](const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  // Largest difference over largest magnitude.
  auto rel = [](const float* got, const float* want, size_t n) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
      diff = std::max(diff, std::abs(double{got[i]} - want[i]));
      scale = std::max(scale, std::abs(double{want[i]}));
    }
    return diff / scale;
  };
  const std::vector<int32_t>& a = cases[0].prompt_ids;
  const std::vector<int32_t>& b = cases[1].prompt_ids;
  const int64_t v = m->vocab_size();
  Tensor ra = run_step(*m, a, 0, all_rows(a));
  const std::vector<float> want_a = values(ra);
  Tensor rb = run_step(*m, b, 0, all_rows(b));
  const std::vector<float> want_b = values(rb);
  Tensor rb_last = run_step(*m, b, 0, {static_cast<int32_t>(b.size()) - 1});
  ASSERT_EQ(ra.dim(0), static_cast<int64_t>(a.size()));
  ASSERT_EQ(rb.dim(0), static_cast<int64_t>(b.size()));
  ASSERT_EQ(rb_last.dim(0), 1);
  EXPECT_EQ(values(ra), want_a) << "a later step wrote a result still held";
  EXPECT_EQ(values(rb), want_b) << "a later step wrote a result still held";
  EXPECT_LE(rel(rb_last.data<float>(), want_b.data() + want_b.size() - v, static_cast<size_t>(v)),
            1e-4);
  EXPECT_GT(rel(want_a.data() + want_a.size() - v, want_b.data() + want_b.size() - v,
                static_cast<size_t>(v)),
            1e-3)
      << "two prompts' last rows, one answer";
  ra = Tensor();
  rb = Tensor();
  rb_last = Tensor();
  const Tensor again_b = run_step(*m, b, 0, all_rows(b));
  const Tensor again_a = run_step(*m, a, 0, all_rows(a));
  ASSERT_EQ(again_a.numel(), static_cast<int64_t>(want_a.size()));
  ASSERT_EQ(again_b.numel(), static_cast<int64_t>(want_b.size()));
  EXPECT_LE(rel(again_b.data<float>(), want_b.data(), want_b.size()), 1e-4);
  EXPECT_LE(rel(again_a.data<float>(), want_a.data(), want_a.size()), 1e-4);
}

class CudaModel16 : public ::testing::TestWithParam<DType> {};

// Each 16-bit dtype against the f32 model and transformers' greedy references (the norms
// folded into the products).
TEST_P(CudaModel16, KjvTeacherForcedAndGreedy) {
  TACHYON_REQUIRE_GPU();
  const DType dt = GetParam();
  auto ref = load_kjv(DType::kF32);
  auto m = load_kjv(dt);
  const int64_t vocab = m->vocab_size();
  const int32_t eos = static_cast<int32_t>(m->config().eos_token_ids.at(0));
  for (const KjvCase& c : kjv_cases()) {
    // The reference path in one prefill: logits at every position from the last
    // prompt token on predict the reference tokens.
    std::vector<int32_t> tokens = c.prompt_ids;
    tokens.insert(tokens.end(), c.greedy.begin(), c.greedy.end() - 1);
    const int32_t p0 = static_cast<int32_t>(c.prompt_ids.size()) - 1;
    std::vector<int32_t> rows;
    for (int32_t i = p0; i < static_cast<int32_t>(tokens.size()); ++i) rows.push_back(i);
    Tensor lr = run_step(*ref, tokens, 0, rows);
    Tensor lg = run_step(*m, tokens, 0, rows);
    const std::vector<double> want = host_values(lr), got = host_values(lg);
    const ErrorReport e = measure(got, want);
    double max_err = 0;
    for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::abs(got[i] - want[i]));
    std::printf("  %s kjv \"%.30s...\": normalised %.2e, max abs %.3f over %zu positions\n",
                dtype_label(dt).c_str(), c.prompt.c_str(), e.normalised, max_err, rows.size());
    EXPECT_FALSE(e.nan);
    EXPECT_LE(e.normalised, 3e-2) << c.prompt;
    int checked = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* pr = lr.data<float>() + r * vocab;
      const float* pg = lg.data<float>() + r * vocab;
      std::vector<float> s(pr, pr + vocab);
      std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
      if (double{s[0]} - s[1] <= 2 * max_err) continue;
      ++checked;
      EXPECT_EQ(std::max_element(pg, pg + vocab) - pg, c.greedy[r])
          << c.prompt << " position " << r;
    }
    EXPECT_GT(checked, static_cast<int>(rows.size()) / 2) << "too few decisive positions";
    // Free-running greedy through the cache, up to the first near tie.
    const Greedy g = greedy(*m, c, eos);
    for (size_t i = 0; i < g.tokens.size() && i < c.greedy.size(); ++i) {
      if (g.margins[i] <= 3 * max_err) break;
      EXPECT_EQ(g.tokens[i], c.greedy[i]) << c.prompt << " step " << i;
      if (g.tokens[i] != c.greedy[i]) break;
    }
  }
}

// A random Llama-shaped checkpoint (head_dim 128, SiLU MLP) written to TempDir/name.
std::string random_llama(const std::string& name, int64_t inter = 2048) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  const std::string config = dir + ".json";
  {
    std::ofstream f(config);
    f << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 1024, "intermediate_size": )"
      << inter << R"(, "num_hidden_layers": 4,
      "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
      "vocab_size": 2048, "max_position_embeddings": 4096, "rope_theta": 10000.0,
      "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "hidden_act": "silu",
      "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"})";
  }
  RandomModelOptions ro;
  ro.seed = 11;
  write_random_model(config, dir, ro);
  return dir;
}

// Teacher-forced logits of a 300-token sequence in chunks (a 200-token prefill, then 20
// decode steps, then a 40-token chunk over the cached prefix) with the fp8 cache and
// the 16-bit one: their normalised difference, printed and bounded; and an fp8 cache
// on a model whose head_dim the decode kernel does not take is refused clearly.
TEST_P(CudaModel16, RandomLlamaFp8KvCache) {
  TACHYON_REQUIRE_GPU();
  const DType dt = GetParam();
  const std::string dir = random_llama("tachyon_fp8_llama");
  auto load = [&](bool fp8) {
    LoadOptions o;
    o.device = Device{DeviceType::kCUDA, 0};
    o.dtype = dt;
    if (fp8) o.kv_cache_dtype = DType::kF8E4M3;
    auto m = load_model(dir, o);
    m->init_kv_cache(96, kBlock);
    return m;
  };
  auto m16 = load(false), m8 = load(true);
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(300);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 2048);
  std::vector<double> got, want;
  auto step = [&](int32_t from, int32_t to) {
    const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + to);
    std::vector<int32_t> rows;
    for (int32_t i = 0; i < to - from; ++i) rows.push_back(i);
    for (auto* m : {m16.get(), m8.get()}) {
      const std::vector<double> v = host_values(run_step(*m, prefix, from, rows));
      (m == m16.get() ? want : got).insert((m == m16.get() ? want : got).end(), v.begin(), v.end());
    }
  };
  step(0, 200);
  for (int32_t i = 200; i < 220; ++i) step(i, i + 1);
  step(220, 260);
  const ErrorReport e = measure(got, want);
  std::printf("  %s fp8 KV against %s KV: normalised %.2e over %zu logits\n",
              dtype_label(dt).c_str(), dtype_label(dt).c_str(), e.normalised, got.size());
  EXPECT_FALSE(e.nan);
  EXPECT_LE(e.normalised, 5e-2);
  EXPECT_GT(e.normalised, 0.0) << "the fp8 cache changed nothing";

  LoadOptions o;
  o.device = Device{DeviceType::kCUDA, 0};
  o.dtype = dt;
  o.kv_cache_dtype = DType::kF8E4M3;
  auto kjv = load_model(std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat", o);
  kjv->init_kv_cache(96, kBlock);
  EXPECT_THROW(run_step(*kjv, {1, 2, 3}, 0, {2}), InvalidArgument);
}

// The decoder's default paths on the wgmma GEMM (Hopper) against the CPU backend's f32
// forward of the same checkpoint (products apart, norms not folded), with an MLP
// kDeepK wide: prefills of 700 tokens (the gate and up products with the gated epilogue,
// one launch a layer) and 2,100 (from kEpilogueRows also the qkv product with the
// rotary and cache write in its epilogue, qkv and gate/up normalising their rows
// themselves with the norms folded into their weights, and the down projection adding
// into the residual stream: three launches a layer, two with row scales, and every
// layer's qkv but the first taking its row scales from the squares the down
// projection's add kept), then decode steps through the cache.
TEST_P(CudaModel16, RandomLlamaWgmmaPaths) {
  TACHYON_REQUIRE_GPU();
  const DType dt = GetParam();
  int major = 0, minor = 0;
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  const bool active = major == 9 && minor == 0;
  EXPECT_EQ(cuda::gemm_wgmma_active(dt), active);
  const std::string dir = random_llama("tachyon_wgmma_llama", cuda::CudaBackend::kDeepK);
  constexpr int32_t kBlocks = 160;  // 2,560 tokens
  LoadOptions o;
  o.device = Device{DeviceType::kCUDA, 0};
  o.dtype = dt;
  auto m = load_model(dir, o);
  m->init_kv_cache(kBlocks, kBlock);
  LoadOptions oc;
  oc.device = Device{DeviceType::kCPU, 0};
  auto ref = load_model(dir, oc);
  ref->init_kv_cache(kBlocks, kBlock);
  constexpr int64_t kLayers = 4;
  for (int32_t n : {700, 2100}) {
    std::mt19937 rng(17 + n);
    std::vector<int32_t> tokens(static_cast<size_t>(n) + 4);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 2048);
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + n);
    const std::vector<int32_t> rows = {0, n / 2, n - 3, n - 2, n - 1};
    const int64_t before = cuda::gemm_wgmma_launches();
    const int64_t rms_before = cuda::gemm_wgmma_rms_launches();
    const int64_t parts_before = cuda::row_inv_rms_parts_launches();
    std::vector<double> got = host_values(run_step(*m, prompt, 0, rows, kBlocks));
    const int64_t launches = cuda::gemm_wgmma_launches() - before;
    const int64_t rms = cuda::gemm_wgmma_rms_launches() - rms_before;
    const int64_t parts = cuda::row_inv_rms_parts_launches() - parts_before;
    const bool epilogues = active && n >= cuda::CudaBackend::kEpilogueRows;
    EXPECT_EQ(launches, active ? (epilogues ? 3 : 1) * kLayers : 0) << n << " tokens";
    EXPECT_EQ(rms, epilogues ? 2 * kLayers : 0) << n << " tokens";
    EXPECT_EQ(parts, epilogues ? kLayers - 1 : 0) << n << " tokens";
    std::vector<double> want = host_values(run_step(*ref, prompt, 0, rows, kBlocks));
    for (int32_t i = n; i < n + 4; ++i) {  // decode steps
      const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + i + 1);
      const std::vector<double> g = host_values(run_step(*m, prefix, i, {0}, kBlocks));
      const std::vector<double> w = host_values(run_step(*ref, prefix, i, {0}, kBlocks));
      got.insert(got.end(), g.begin(), g.end());
      want.insert(want.end(), w.begin(), w.end());
    }
    const ErrorReport e = measure(got, want);
    std::printf(
        "  %s %d tokens and 4 decode steps (%lld wgmma launches, %lld with row scales, %lld "
        "from kept squares) against the CPU in f32: normalised %.2e over %zu logits\n",
        dtype_label(dt).c_str(), n, static_cast<long long>(launches), static_cast<long long>(rms),
        static_cast<long long>(parts), e.normalised, got.size());
    EXPECT_FALSE(e.nan);
    EXPECT_LE(e.normalised, 3e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaModel16, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
