// Paged attention on the GPU against the CPU backend: prefill, chunked prefill, decode
// (the split-K path), mixed batches; head_dim 64..256; GQA ratios 1, 4, 8 and MQA;
// block boundaries (odd block sizes); sliding window, softcapping, ALiBi; a bidirectional
// prefix (ChatGLM-6B's prompt context: the simple kernel only); tree masks over a step's
// own tokens (speculative verification: the simple kernel only). Every case runs through
// each kernel that applies to it; the Flash* cases are shaped around the
// FlashAttention-2 kernel's tiles (128 rows of query x head, 64 keys; on Hopper each
// runs with and without its wgmma form), and the decode
// kernel's own cases (tile, split and pipeline edges, the Llama-3-8B shape, long
// contexts, many sequences, several queries per sequence, bucketed context hints, bad
// block ids) follow the general ones. Last, an fp8 (e4m3) KV cache: the writes against
// the host's rounding, and attention through every kernel (the decode kernel reading
// e4m3, the others staged blocks) against the CPU backend on the rounded keys and values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>

#include "backend/cuda/kernels.h"
#include "backend/ops.h"
#include "core/error.h"
#include "cuda/cuda_test_util.h"

namespace tachyon::cuda_test {
namespace {

struct SeqSpec {
  int32_t cached;      // tokens already in the cache
  int32_t q_len;       // tokens of this step
  int32_t prefix = 0;  // a bidirectional prefix (AttentionMeta::prefix_lens)
  bool tree = false;   // a random tree mask over the step's tokens (AttentionMeta::tree_mask)
};

struct AttnCase {
  std::string name;
  int32_t heads, kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  int32_t window = 0;
  float softcap = 0.f;
  bool alibi = false;
  bool alibi_bf16 = false;
  // Block-table entries of blocks wholly before a sequence's sliding window are -1 (an
  // engine may have freed them): no kernel may read them.
  bool unset_before_window = false;
  // No host copies of the lengths in the metadata (the flash kernel then runs its dense
  // grid instead of a work list).
  bool no_host_lens = false;
  // Fill the whole cache with random values directly (instead of writing the cached
  // tokens through write_kv): fast enough for contexts of many thousand tokens.
  bool direct_cache = false;
  // > 0: the max_context_len hint (a bucketed bound, as in CUDA-graph replay).
  int32_t ctx_hint = 0;
};

using Kernel = cuda::CudaBackend::AttentionKernel;

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kSimple:
      return "simple";
    case Kernel::kDecode:
      return "decode";
    case Kernel::kFlash:
      return "flash";
    case Kernel::kDecodeAndFlash:
      return "decode+flash";
    default:
      return "auto";
  }
}

// Uniform values in [-1.7, 1.7) (about unit variance) from a counter hash: quick for
// caches of a hundred million elements.
inline Tensor fast_uniform(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = (static_cast<float>(z >> 40) * (1.f / 16777216.f) - 0.5f) * 3.4f;
  }
  return t;
}

class CudaAttentionTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TACHYON_REQUIRE_GPU();
    dt_ = GetParam();
    gpu_ = make_gpu(dt_, fp8_);
    cpu_ = make_cpu_backend();
    rng_.seed(99);
  }

  // Runs the case through every kernel that applies (ran() says which did), then once
  // with the automatic choice (auto_ran_).
  void run(const AttnCase& c) {
    const QkvLayout layout{c.heads, c.kv_heads, c.head_dim};
    const int32_t bs = c.block_size;
    const int32_t S = static_cast<int32_t>(c.seqs.size());
    // Blocks, handed out in shuffled order.
    int32_t total_blocks = 2, max_blocks = 0, max_q = 0, max_ctx = 0;
    for (const SeqSpec& s : c.seqs) {
      const int32_t nb = (s.cached + s.q_len + bs - 1) / bs;
      total_blocks += nb;
      max_blocks = std::max(max_blocks, nb);
      max_q = std::max(max_q, s.q_len);
      max_ctx = std::max(max_ctx, s.cached + s.q_len);
    }
    std::vector<int32_t> pool(static_cast<size_t>(total_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng_);
    std::vector<int32_t> tables(static_cast<size_t>(S) * max_blocks, -1);
    for (int32_t s = 0, next = 0; s < S; ++s) {
      const int32_t nb = (c.seqs[s].cached + c.seqs[s].q_len + bs - 1) / bs;
      for (int32_t i = 0; i < nb; ++i) tables[s * max_blocks + i] = pool[next++];
      if (c.unset_before_window && c.window > 0) {
        const int32_t first_key = std::max(0, c.seqs[s].cached - c.window + 1);
        for (int32_t i = 0; (i + 1) * bs <= first_key; ++i) tables[s * max_blocks + i] = -1;
      }
    }
    auto slot_of = [&](int32_t s, int32_t idx) {
      return tables[s * max_blocks + idx / bs] * bs + idx % bs;
    };
    std::vector<int32_t> pre_slots, step_slots, qstart = {0}, ctx;
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t i = 0; i < c.seqs[s].cached; ++i) pre_slots.push_back(slot_of(s, i));
      for (int32_t i = 0; i < c.seqs[s].q_len; ++i)
        step_slots.push_back(slot_of(s, c.seqs[s].cached + i));
      qstart.push_back(qstart.back() + c.seqs[s].q_len);
      ctx.push_back(c.seqs[s].cached + c.seqs[s].q_len);
    }
    const Shape cache_shape = {total_blocks, c.kv_heads, bs, c.head_dim};
    LayerKvCache ref, g;
    // With an fp8 cache the reference holds the e4m3-rounded keys and values.
    auto kv_ref = [&](const Tensor& t) { return fp8_ ? e4m3_rounded(t) : t; };
    if (fp8_) {
      ASSERT_FALSE(c.direct_cache) << "fp8 cases write the cache through write_kv";
      g = {gpu_->alloc(cache_shape, DType::kF8E4M3), gpu_->alloc(cache_shape, DType::kF8E4M3)};
      gpu_->fill_zero(g.k);
      gpu_->fill_zero(g.v);
      Tensor zero = Tensor::zeros(cache_shape, DType::kF32);
      ref = {zero.clone(), zero.clone()};
    } else if (c.direct_cache) {
      ref = {rounded(fast_uniform(cache_shape, rng_()), dt_),
             rounded(fast_uniform(cache_shape, rng_()), dt_)};
      g = {to_gpu(*gpu_, ref.k, dt_), to_gpu(*gpu_, ref.v, dt_)};
    } else {
      Tensor zero = Tensor::zeros(cache_shape, DType::kF32);
      ref = {zero.clone(), zero.clone()};
      g = {to_gpu(*gpu_, zero, dt_), to_gpu(*gpu_, zero, dt_)};
    }
    auto host_i32 = [](const std::vector<int32_t>& v) {
      Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
      std::copy(v.begin(), v.end(), t.data<int32_t>());
      return t;
    };
    if (!pre_slots.empty() && !c.direct_cache) {
      Tensor pre =
          rounded(randn({static_cast<int64_t>(pre_slots.size()), layout.row_cols()}, rng_), dt_);
      cpu_->write_kv(kv_ref(pre), layout, host_i32(pre_slots), ref);
      gpu_->write_kv(to_gpu(*gpu_, pre, dt_), layout, to_gpu_i32(*gpu_, pre_slots), g);
    }
    const int64_t T = qstart.back();
    Tensor qkv = rounded(randn({T, layout.row_cols()}, rng_), dt_);
    Tensor qkv_g = to_gpu(*gpu_, qkv, dt_);
    cpu_->write_kv(kv_ref(qkv), layout, host_i32(step_slots), ref);
    gpu_->write_kv(qkv_g, layout, to_gpu_i32(*gpu_, step_slots), g);

    AttentionParams p;
    p.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
    p.softcap = c.softcap;
    p.sliding_window = c.window;
    AttentionParams pg = p;
    if (c.alibi) {
      Tensor slopes = Tensor::empty({c.heads}, DType::kF32);
      for (int h = 0; h < c.heads; ++h)
        slopes.data<float>()[h] = std::pow(2.f, -8.f * (h + 1) / static_cast<float>(c.heads));
      p.alibi_slopes = slopes;
      p.alibi_scale = 0.7f;
      p.alibi_bias_bf16 = c.alibi_bf16;
      pg = p;
      pg.alibi_slopes = gpu_->prepare_weight(slopes);
    }
    AttentionMeta mh, mg;
    mh.query_start = host_i32(qstart);
    mh.context_lens = host_i32(ctx);
    mh.block_tables = host_i32(tables);
    mg.query_start = to_gpu_i32(*gpu_, qstart);
    mg.context_lens = to_gpu_i32(*gpu_, ctx);
    mg.block_tables = to_gpu_i32(*gpu_, tables);
    for (AttentionMeta* m : {&mh, &mg}) {
      m->num_seqs = S;
      m->max_blocks_per_seq = max_blocks;
      m->max_query_len = max_q;
      m->max_context_len = std::max(max_ctx, c.ctx_hint);
    }
    std::vector<int32_t> prefix;
    for (const SeqSpec& s : c.seqs) prefix.push_back(s.prefix);
    if (std::any_of(prefix.begin(), prefix.end(), [](int32_t p) { return p > 0; })) {
      mh.prefix_lens = host_i32(prefix);
      mg.prefix_lens = to_gpu_i32(*gpu_, prefix);
    }
    // Tree masks: each step token sees itself and a random half of the earlier ones.
    std::vector<int32_t> tree_words, tree_start;
    for (const SeqSpec& s : c.seqs) {
      if (!s.tree) {
        tree_start.push_back(-1);
        continue;
      }
      const int64_t q = s.q_len, start = static_cast<int64_t>(tree_words.size());
      tree_start.push_back(static_cast<int32_t>(start));
      tree_words.resize(static_cast<size_t>(start + (q * q + 31) / 32), 0);
      for (int64_t i = 0; i < q; ++i)
        for (int64_t j = 0; j <= i; ++j)
          if (j == i || rng_() % 2 == 0) {
            const int64_t bit = i * q + j;
            auto& w = tree_words[static_cast<size_t>(start + bit / 32)];
            w = static_cast<int32_t>(static_cast<uint32_t>(w) | (1u << (bit % 32)));
          }
    }
    if (!tree_words.empty()) {
      mh.tree_mask = host_i32(tree_words);
      mh.tree_mask_start = host_i32(tree_start);
      mg.tree_mask = to_gpu_i32(*gpu_, tree_words);
      mg.tree_mask_start = to_gpu_i32(*gpu_, tree_start);
    }
    Tensor out_ref = Tensor::empty({T, layout.q_cols()}, DType::kF32);
    cpu_->attention(qkv, layout, ref, mh, p, out_ref);
    auto want_for = [&](Kernel) { return host_values(out_ref); };
    if (!c.no_host_lens) {
      mg.host_query_start = &qstart;
      mg.host_context_lens = &ctx;
    }
    ran_.clear();
    for (Kernel kernel : {Kernel::kSimple, Kernel::kDecode, Kernel::kFlash}) {
      gpu_->set_attention_kernel(kernel);
      Tensor out = poisoned(*gpu_, {T, layout.q_cols()}, dt_);
      gpu_->attention(qkv_g, layout, g, mg, pg, out);
      if (gpu_->last_attention_kernel() != kernel) continue;  // not applicable here
      ran_.push_back(kernel);
      expect_near(host_values(*gpu_, out), want_for(kernel), bound_for(dt_),
                  dtype_label(dt_) + " " + kernel_name(kernel) + " " + c.name);
    }
    // The automatic choice (which may split a mixed step between two kernels), checked
    // the same way.
    gpu_->set_attention_kernel(Kernel::kAuto);
    Tensor out = poisoned(*gpu_, {T, layout.q_cols()}, dt_);
    gpu_->attention(qkv_g, layout, g, mg, pg, out);
    auto_ran_ = gpu_->last_attention_kernel();
    expect_near(host_values(*gpu_, out), want_for(auto_ran_), bound_for(dt_),
                dtype_label(dt_) + " auto (" + kernel_name(auto_ran_) + ") " + c.name);
    // The flash kernel's other forms (forms_), on the same inputs against the same
    // reference.
    for (const FlashForm& form : forms_) {
      form.set(true);
      gpu_->set_attention_kernel(Kernel::kFlash);
      Tensor fout = poisoned(*gpu_, {T, layout.q_cols()}, dt_);
      gpu_->attention(qkv_g, layout, g, mg, pg, fout);
      const bool took = gpu_->last_attention_kernel() == Kernel::kFlash;
      form.set(false);
      EXPECT_TRUE(took) << c.name << " (" << form.label << ")";
      if (took)
        expect_near(host_values(*gpu_, fout), want_for(Kernel::kFlash), bound_for(dt_),
                    dtype_label(dt_) + " flash (" + form.label + ") " + c.name);
    }
  }

  // A form of the flash kernel: set(true) switches it on, set(false) back off.
  struct FlashForm {
    std::string label;
    std::function<void(bool)> set;
  };
  std::vector<FlashForm> forms_;
  // The wgmma kernel's alternative: the mma.sync kernel that pre-Hopper devices run.
  static std::vector<FlashForm> wgmma_forms() {
    return {{"mma.sync", [](bool on) { cuda::set_flash_wgmma(!on); }}};
  }

  // Whether the last run() ran the kernel (it applied to the case).
  bool ran(Kernel k) const { return std::find(ran_.begin(), ran_.end(), k) != ran_.end(); }
  // run(), and for bf16/f16 a check that the flash kernel took the case; where the
  // wgmma form applies (sm_90a, head_dim 64 or 128), the flash kernel again on the same
  // inputs on mma.sync, and that the wgmma form took the copy-engine loads where they
  // apply (no sliding window and block sizes of whole 8-key runs that tile 64 keys; else
  // it keeps cp.async).
  void run_flash(const AttnCase& c) {
    const bool wgmma = cuda::attention_flash_wgmma_active(dt_, c.head_dim);
    if (wgmma) forms_ = wgmma_forms();
    const int64_t before = cuda::flash_tma_launches();
    run(c);
    forms_.clear();
    if (dt_ != DType::kF32) {
      EXPECT_TRUE(ran(Kernel::kFlash)) << c.name;
    }
    if (!wgmma) return;
    const int bs = c.block_size;
    const bool applies = c.window <= 0 && bs % 8 == 0 && (64 % bs == 0 || bs % 64 == 0);
    EXPECT_EQ(cuda::flash_tma_launches() > before, applies) << c.name << " (tma)";
  }

  // The decode kernel's plan for the case's shape (what it splits the keys by).
  cuda::AttentionPlan decode_plan(const AttnCase& c) const {
    cuda::AttentionArgs a;
    a.type = dt_;
    a.heads = c.heads;
    a.kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.block_size = c.block_size;
    a.num_seqs = static_cast<int32_t>(c.seqs.size());
    for (const SeqSpec& q : c.seqs) {
      a.tokens += q.q_len;
      a.max_query_len = std::max(a.max_query_len, q.q_len);
      a.max_context_len = std::max(a.max_context_len, q.cached + q.q_len);
    }
    a.max_context_len = std::max(a.max_context_len, c.ctx_hint);
    return cuda::plan_attention_decode(a, gpu_->num_sms());
  }

  // run() for a case the decode kernel must take (in bf16 and f16), with its plan.
  void run_decode(const AttnCase& c) {
    if (dt_ != DType::kF32) {
      const cuda::AttentionPlan p = decode_plan(c);
      std::printf("  %s: decode plan %d split(s) of %d keys%s\n", c.name.c_str(), p.num_splits,
                  p.num_splits > 1 ? p.split_keys : 0, p.cluster ? ", merged in a cluster" : "");
    }
    run(c);
    if (dt_ != DType::kF32) {
      EXPECT_TRUE(ran(Kernel::kDecode)) << c.name << ": the decode kernel did not run";
    }
  }

  bool fp8_ = false;  // the GPU's KV cache in e4m3 (CudaAttentionFp8Test)
  DType dt_ = DType::kBF16;
  std::vector<Kernel> ran_;
  Kernel auto_ran_ = Kernel::kAuto;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::unique_ptr<Backend> cpu_;
  std::mt19937 rng_;
};

TEST_P(CudaAttentionTest, PrefillHeadDims) {
  for (int hd : {64, 80, 96, 128, 256})
    run({"prefill hd=" + std::to_string(hd), 8, 2, hd, 16, {{0, 37}, {0, 1}, {0, 64}}});
}

TEST_P(CudaAttentionTest, GroupRatiosAndMqa) {
  run({"gqa 1 (mha)", 8, 8, 128, 16, {{0, 50}, {20, 13}}});
  run({"gqa 4", 8, 2, 128, 16, {{0, 50}, {20, 13}}});
  run({"gqa 8", 16, 2, 128, 16, {{0, 50}, {20, 13}}});
  run({"mqa 16", 16, 1, 128, 16, {{0, 50}, {20, 13}}});
  run({"mqa 48 heads hd 64", 48, 1, 64, 16, {{0, 70}, {300, 1}}});
}

TEST_P(CudaAttentionTest, LongPrefill) {
  run({"prefill 1030 tokens", 8, 2, 128, 16, {{0, 1030}}});
}

TEST_P(CudaAttentionTest, ChunkedPrefillOddBlocks) {
  run({"chunked, block 5", 4, 2, 64, 5, {{100, 37}, {513, 64}, {31, 1}, {4, 6}}});
  run({"chunked, block 16", 8, 2, 96, 16, {{1000, 100}, {15, 17}}});
}

TEST_P(CudaAttentionTest, DecodeSplitK) {
  run({"decode 8 seqs",
       8,
       2,
       128,
       16,
       {{0, 1}, {15, 1}, {16, 1}, {17, 1}, {255, 1}, {1000, 1}, {2047, 1}, {4000, 1}}});
  run({"decode gqa 8 long", 32, 4, 128, 16, {{3000, 1}, {2999, 1}, {1, 1}, {6000, 1}}});
  run({"decode hd 256 mqa", 8, 1, 256, 32, {{5000, 1}, {700, 1}}});
  run({"decode hd 80 block 7", 12, 4, 80, 7, {{1234, 1}, {77, 1}}});
}

// The decode kernel's template cases: head_dim 64/128/256, query groups 1..8 (3, 5 and
// 6 padded to the next instantiation), contexts around tile and split edges.
TEST_P(CudaAttentionTest, DecodeKernelShapes) {
  for (int hd : {64, 128, 256})
    for (int group : {1, 2, 3, 4, 5, 6, 8})
      run({"decode hd " + std::to_string(hd) + " group " + std::to_string(group),
           2 * group,
           2,
           hd,
           16,
           {{0, 1}, {31, 1}, {127, 1}, {128, 1}, {129, 1}, {1023, 1}, {1536, 1}, {3001, 1}}});
  run({"decode block 5, 64 seqs", 32, 8, 128, 5, std::vector<SeqSpec>(64, SeqSpec{517, 1})});
}

// Whole-prompt prefill: several sequences of different lengths, GQA, head_dim 64 and 128.
TEST_P(CudaAttentionTest, WholePromptPrefill) {
  run({"whole prompts gqa 4", 32, 8, 128, 16, {{0, 300}, {0, 1}, {0, 129}, {0, 1030}}});
  run({"whole prompts mha hd 64", 8, 8, 64, 16, {{0, 517}, {0, 64}}});
}

TEST_P(CudaAttentionTest, MixedBatch) {
  run({"mixed prefill + decode", 8, 2, 128, 16, {{600, 1}, {0, 45}, {2100, 1}, {30, 9}}});
}

TEST_P(CudaAttentionTest, SlidingWindowSoftcapAlibi) {
  AttnCase w{"sliding window 64", 8, 2, 128, 16, {{0, 200}, {300, 40}, {1000, 1}, {63, 1}}};
  w.window = 64;
  run(w);
  AttnCase sc{"softcap 2 + window 32, hd 256", 8, 4, 256, 16, {{0, 90}, {500, 1}}};
  sc.softcap = 2.f;
  sc.window = 32;
  run(sc);
  AttnCase al{"alibi", 8, 8, 64, 16, {{0, 77}, {900, 1}, {50, 20}}};
  al.alibi = true;
  run(al);
  AttnCase alb{"alibi bf16 bias", 8, 8, 64, 16, {{0, 77}, {1500, 1}}};
  alb.alibi = true;
  alb.alibi_bf16 = true;
  run(alb);
}

// Prompt lengths around the flash kernel's query tiles (128 / group queries: 32 at
// group 4, 128 at group 1) and key tiles (64), each next to 1-token sequences.
TEST_P(CudaAttentionTest, FlashTileEdges) {
  const std::vector<SeqSpec> lens = {{0, 1},   {0, 15},  {0, 16},  {0, 31},  {0, 32},
                                     {0, 33},  {0, 63},  {0, 64},  {0, 65},  {0, 1},
                                     {0, 127}, {0, 128}, {0, 129}, {0, 255}, {0, 257}};
  run_flash({"flash edges gqa 4", 8, 2, 128, 16, lens});
  run_flash({"flash edges mha", 4, 4, 128, 16, lens});
  run_flash({"flash edges gqa 8 hd 64", 16, 2, 64, 16, {{0, 16}, {0, 1}, {0, 17}, {0, 200}}});
}

// Chunked prefill and prefix caching: queries after a cached prefix (the diagonal
// falls anywhere in a key tile), odd and power-of-two block sizes.
TEST_P(CudaAttentionTest, FlashCachedPrefixes) {
  const std::vector<SeqSpec> seqs = {{100, 37}, {513, 64}, {31, 1}, {4, 6}, {1000, 300},
                                     {64, 64},  {63, 65},  {0, 16}, {1, 1}, {127, 129}};
  for (int bs : {5, 7, 16, 32, 64, 128}) {
    run_flash({"flash cached, block " + std::to_string(bs), 8, 2, 128, bs, seqs});
    run_flash({"flash cached hd 64 mha, block " + std::to_string(bs), 4, 4, 64, bs, seqs});
  }
  AttnCase dense{"flash cached, dense grid", 8, 2, 128, 16, seqs};
  dense.no_host_lens = true;
  run_flash(dense);
  dense.name = "flash cached hd 96 group 3, dense grid";
  dense.heads = 12;
  dense.kv_heads = 4;
  dense.head_dim = 96;
  run_flash(dense);
}

// Query heads per KV head 1..128: groups that do not divide the 128 rows (3, 5, 48)
// leave rows and warps of a block idle.
TEST_P(CudaAttentionTest, FlashGroups) {
  const std::vector<SeqSpec> seqs = {{0, 70}, {20, 13}, {300, 1}, {5, 40}};
  run_flash({"flash group 1", 8, 8, 128, 16, seqs});
  run_flash({"flash group 2", 8, 4, 128, 16, seqs});
  run_flash({"flash group 3", 12, 4, 128, 16, seqs});
  run_flash({"flash group 4", 8, 2, 128, 16, seqs});
  run_flash({"flash group 5", 10, 2, 128, 16, seqs});
  run_flash({"flash group 8", 32, 4, 128, 16, seqs});
  run_flash({"flash mqa 16", 16, 1, 128, 16, seqs});
  run_flash({"flash mqa 48 hd 64", 48, 1, 64, 16, seqs});
  run_flash({"flash mqa 128 hd 64", 128, 1, 64, 16, {{0, 20}, {7, 3}}});
}

TEST_P(CudaAttentionTest, FlashHeadDims) {
  for (int hd : {64, 80, 96, 128, 256})
    run_flash({"flash hd " + std::to_string(hd),
               8,
               2,
               hd,
               16,
               {{0, 100}, {0, 1}, {200, 70}, {0, 129}, {33, 1}}});
}

// Windows narrower and wider than a key tile, with cached prefixes, and block-table
// entries before the window unset.
TEST_P(CudaAttentionTest, FlashSlidingWindow) {
  for (int w : {1, 17, 64, 100, 700}) {
    AttnCase c{"flash window " + std::to_string(w),
               8,
               2,
               128,
               16,
               {{0, 300}, {500, 90}, {1000, 1}, {63, 1}, {40, 200}}};
    c.window = w;
    c.unset_before_window = true;
    run_flash(c);
  }
  AttnCase mha{"flash window 50 mha block 7 hd 64", 4, 4, 64, 7, {{0, 260}, {333, 33}}};
  mha.window = 50;
  mha.unset_before_window = true;
  run_flash(mha);
  mha.name = "flash window 50 mha block 7 hd 64, dense grid";
  mha.no_host_lens = true;
  run_flash(mha);
}

TEST_P(CudaAttentionTest, FlashManySequences) {
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < 64; ++i) seqs.push_back({(i % 5) * 37, i % 7 == 3 ? 1 : 1 + (i * 29) % 150});
  run_flash({"flash 64 seqs", 16, 4, 128, 16, seqs});
  // A chunked-prefill step: many decode rows beside one long chunk.
  std::vector<SeqSpec> mixed(100, SeqSpec{300, 1});
  mixed.push_back({200, 2000});
  mixed.push_back({0, 17});
  run_flash({"flash 100 decode rows + 2000-token chunk", 32, 8, 128, 16, mixed});
}

TEST_P(CudaAttentionTest, FlashLongPrompt) {
  run_flash({"flash prefill 4000 tokens", 8, 2, 128, 16, {{0, 4000}}});
  run_flash({"flash chunk 1000 after 3000 cached, block 32", 8, 2, 128, 32, {{3000, 1000}}});
}

// On Hopper the flash kernel's common head sizes run on wgmma (the sm_90a image is
// built and chosen); elsewhere they stay on mma.sync.
TEST_P(CudaAttentionTest, FlashWgmmaOnHopper) {
  int major = 0, minor = 0;
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  const bool hopper = major == 9 && minor == 0;
  for (int hd : {64, 128}) {
    EXPECT_EQ(cuda::attention_flash_wgmma_active(DType::kBF16, hd), hopper) << hd;
    EXPECT_EQ(cuda::attention_flash_wgmma_active(DType::kF16, hd), hopper) << hd;
  }
  EXPECT_FALSE(cuda::attention_flash_wgmma_active(DType::kBF16, 96));
  EXPECT_FALSE(cuda::attention_flash_wgmma_active(DType::kF32, 128));
}

// The Llama-3-8B attention shape (32 heads, 8 KV heads, head_dim 128).
TEST_P(CudaAttentionTest, FlashLlama8bShape) {
  run_flash({"flash llama-3-8b 1 x 1024", 32, 8, 128, 16, {{0, 1024}}});
  run_flash({"flash llama-3-8b 8 x 1024", 32, 8, 128, 16, std::vector<SeqSpec>(8, {0, 1024})});
}

// The automatic choice: flash for prefill-sized steps in bf16/f16 (with the decode
// kernel for the single-query sequences of mixed steps), the decode kernel for decode
// steps; softcapping takes the simple kernel.
TEST_P(CudaAttentionTest, AutoPicksFlashForPrefill) {
  run({"auto prefill", 8, 2, 128, 16, {{0, 100}, {50, 20}}});
  if (dt_ != DType::kF32) {
    EXPECT_EQ(auto_ran_, Kernel::kFlash);
  }
  run({"auto mixed", 8, 2, 128, 16, {{600, 1}, {0, 45}, {2100, 1}}});
  if (dt_ != DType::kF32) {
    EXPECT_EQ(auto_ran_, Kernel::kDecodeAndFlash);
  }
  run({"auto decode", 8, 2, 128, 16, {{600, 1}, {10, 1}}});
  if (dt_ != DType::kF32) {
    EXPECT_EQ(auto_ran_, Kernel::kDecode);
  }
  AttnCase sc{"auto softcap", 8, 2, 128, 16, {{0, 100}}};
  sc.softcap = 30.f;
  run(sc);
  EXPECT_EQ(auto_ran_, Kernel::kSimple);
  EXPECT_FALSE(ran(Kernel::kFlash));
}

// Batch-invariant mode keeps every step on the simple kernel, flash forced or not.
TEST_P(CudaAttentionTest, BatchInvariantSkipsFlash) {
  CudaBackendOptions o;
  o.dtype = dt_;
  o.batch_invariant = true;
  gpu_ = std::make_unique<cuda::CudaBackend>(o);
  run({"batch invariant prefill", 8, 2, 128, 16, {{0, 100}, {50, 20}}});
  EXPECT_EQ(auto_ran_, Kernel::kSimple);
  EXPECT_EQ(ran_, std::vector<Kernel>{Kernel::kSimple});
}

// ---- the decode kernel (attention_decode.cu) ----------------------------------------

#define TACHYON_SKIP_F32()                                                          \
  do {                                                                              \
    if (dt_ == DType::kF32) GTEST_SKIP() << "the decode kernel takes bf16 and f16"; \
  } while (0)

TEST_P(CudaAttentionTest, DecodeLlama8bShape) {
  TACHYON_SKIP_F32();
  AttnCase c{
      "decode llama-3-8b 64 x 1024", 32, 8, 128, 16, std::vector<SeqSpec>(64, SeqSpec{1023, 1})};
  c.direct_cache = true;
  run_decode(c);
}

// Contexts at the edges of a 16-key tile, of a round of the 4 warps (64 keys), of the
// pipeline (3 tiles per warp: 192 keys) and of the splits around them.
TEST_P(CudaAttentionTest, DecodeContextEdges) {
  TACHYON_SKIP_F32();
  std::vector<SeqSpec> seqs;
  for (int32_t ctx :
       {1,   2,   15,  16,  17,  63,   64,   65,   127,  128,  129,  191,  192,  193, 255,
        256, 257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097})
    seqs.push_back({ctx - 1, 1});
  auto edges = [&](const std::string& name, int32_t heads, int32_t kv_heads, int32_t hd) {
    AttnCase c{name, heads, kv_heads, hd, 16, seqs};
    c.direct_cache = true;
    run_decode(c);
  };
  for (int hd : {64, 128, 256}) edges("decode context edges hd " + std::to_string(hd), 8, 2, hd);
  edges("decode context edges mha", 4, 4, 128);
  edges("decode context edges group 8", 16, 2, 128);
}

// Contexts one below, at and one above the plan's split boundaries.
TEST_P(CudaAttentionTest, DecodeSplitEdges) {
  TACHYON_SKIP_F32();
  for (int group : {1, 3, 4, 8}) {
    for (int32_t max_ctx : {1000, group == 4 ? 4097 : 9000}) {
      AttnCase c{
          "decode split edges group " + std::to_string(group) + " ctx " + std::to_string(max_ctx),
          2 * group,
          2,
          128,
          16,
          std::vector<SeqSpec>(24, SeqSpec{max_ctx - 1, 1})};
      c.direct_cache = true;
      const cuda::AttentionPlan p = decode_plan(c);
      std::vector<int32_t> ctxs;
      for (int k : {1, 2, p.num_splits - 1}) {
        if (k < 1 || k >= p.num_splits) continue;
        for (int d : {-1, 0, 1}) ctxs.push_back(k * p.split_keys + d);
      }
      const int32_t last = (p.num_splits - 1) * (p.num_splits > 1 ? p.split_keys : 0);
      for (int d : {1, 15, 17, 64, 65, 193}) ctxs.push_back(last + d);
      std::mt19937 r(static_cast<uint32_t>(max_ctx + group));
      for (size_t i = 0; i + 1 < c.seqs.size(); ++i) {
        const int32_t x = i < ctxs.size() ? ctxs[i] : 1 + static_cast<int32_t>(r() % max_ctx);
        c.seqs[i] = {std::clamp(x, 1, max_ctx) - 1, 1};
      }
      run_decode(c);
    }
  }
}

TEST_P(CudaAttentionTest, DecodeLongContext) {
  TACHYON_SKIP_F32();
  AttnCase c{"decode 1 x 32768", 32, 8, 128, 16, {{32767, 1}}};
  c.direct_cache = true;
  run_decode(c);
  AttnCase w{"decode 20000 + 5000, window 4096", 8, 2, 128, 16, {{19999, 1}, {4999, 1}}};
  w.window = 4096;
  w.direct_cache = true;
  run_decode(w);
  AttnCase sc{"decode 12000, softcap + alibi bf16", 8, 8, 64, 16, {{11999, 1}, {3000, 1}}};
  sc.softcap = 5.f;
  sc.alibi = true;
  sc.alibi_bf16 = true;
  sc.direct_cache = true;
  run_decode(sc);
}

TEST_P(CudaAttentionTest, DecodeOddBlockSizes) {
  TACHYON_SKIP_F32();
  for (int bs : {1, 3, 5, 7, 24, 32, 48})
    run_decode({"decode block " + std::to_string(bs),
                8,
                2,
                128,
                bs,
                {{0, 1}, {15, 1}, {16, 1}, {63, 1}, {64, 1}, {200, 1}, {1100, 1}, {2500, 1}}});
}

// Sequences with several queries through the decode kernel (8 / group per pass).
TEST_P(CudaAttentionTest, DecodeSeveralQueries) {
  for (int group : {1, 2, 3, 4, 8})
    run_decode({"decode several queries group " + std::to_string(group),
                2 * group,
                2,
                128,
                16,
                {{100, 2}, {0, 9}, {33, 3}, {700, 17}, {5, 1}, {1500, 8}}});
  AttnCase w{
      "decode several queries, window 50, softcap", 8, 2, 64, 16, {{300, 7}, {20, 40}, {999, 3}}};
  w.window = 50;
  w.softcap = 3.f;
  run_decode(w);
  AttnCase al{"decode several queries, alibi bf16, block 7", 8, 8, 128, 7, {{77, 5}, {900, 2}}};
  al.alibi = true;
  al.alibi_bf16 = true;
  run_decode(al);
}

TEST_P(CudaAttentionTest, DecodeManySequences) {
  TACHYON_SKIP_F32();
  std::mt19937 r(7);
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < 320; ++i) seqs.push_back({static_cast<int32_t>(r() % 1200), 1});
  AttnCase c{"decode 320 seqs, contexts 1..1200", 8, 2, 128, 16, seqs};
  c.direct_cache = true;
  run_decode(c);
  seqs.resize(300);
  AttnCase mha{"decode 300 seqs, mha hd 64", 4, 4, 64, 16, seqs};
  mha.direct_cache = true;
  run_decode(mha);
}

// The split merge in a thread-block cluster (distributed shared memory) against the
// last-block merge through global memory: the same cases both ways, each checked against
// the CPU backend; group sizes 1 and 8, head dims 64 and 256, several queries a
// sequence (one cluster merge per pass), a context hint past the real contexts (empty
// splits in the cluster). On sm_90 the Llama-3-8B batch-1 shape plans a cluster merge,
// eagerly (context 1023) and in a decode graph's 1536-key bucket.
TEST_P(CudaAttentionTest, DecodeClusterMerge) {
  TACHYON_SKIP_F32();
  int major = 0;
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  std::vector<AttnCase> cases = {
      {"cluster llama-3-8b batch 1", 32, 8, 128, 16, {{1023, 1}}},
      {"cluster batch 4 mixed contexts", 32, 8, 128, 16, {{0, 1}, {300, 1}, {1500, 1}, {2047, 1}}},
      {"cluster group 1 hd 64", 8, 8, 64, 16, {{700, 1}, {4000, 1}}},
      {"cluster mqa hd 256 block 7", 8, 1, 256, 7, {{999, 1}, {64, 1}}},
      {"cluster three queries", 8, 2, 128, 16, {{1200, 3}, {40, 3}}},
  };
  AttnCase hinted{"cluster hint 4096", 8, 2, 128, 16, {{100, 1}, {900, 1}}};
  hinted.ctx_hint = 4096;
  cases.push_back(hinted);
  AttnCase bucket{"cluster llama-3-8b batch 1, 1536-key bucket", 32, 8, 128, 16, {{1060, 1}}};
  bucket.ctx_hint = 1536;
  cases.push_back(bucket);
  for (const AttnCase& c : cases) {
    for (bool on : {true, false}) {
      cuda::set_decode_cluster_merge(on && major >= 9);
      const cuda::AttentionPlan p = decode_plan(c);
      if (!on) {
        EXPECT_FALSE(p.cluster) << c.name;
      }
      if (p.cluster) {
        EXPECT_TRUE(p.num_splits >= 2 && p.num_splits <= 16) << c.name;
      }
      AttnCase named = c;
      named.name += on ? " (cluster merge)" : " (global merge)";
      run_decode(named);
    }
  }
  cuda::set_decode_cluster_merge(major >= 9);
  if (major == 9) {
    EXPECT_TRUE(decode_plan(cases[0]).cluster);
    EXPECT_TRUE(decode_plan(bucket).cluster);
  }
}

// A context hint above every real context (a CUDA-graph bucket): splits past a
// sequence's end are empty and must not disturb the merge.
TEST_P(CudaAttentionTest, DecodeBucketedContextHint) {
  TACHYON_SKIP_F32();
  AttnCase c{"decode contexts to 3000, hint 8192",  32, 8, 128, 16,
             {{0, 1}, {99, 1}, {999, 1}, {2999, 1}}};
  c.ctx_hint = 8192;
  run_decode(c);
  AttnCase one{"decode context 700, hint 32768", 8, 2, 128, 16, {{699, 1}}};
  one.ctx_hint = 32768;
  run_decode(one);
}

// A block id past the pool for a key the query needs is reported (and the step's
// error raised on synchronisation); one past the context is not read.
TEST_P(CudaAttentionTest, DecodeBadBlockIdReported) {
  TACHYON_SKIP_F32();
  using K = cuda::CudaBackend::AttentionKernel;
  const QkvLayout layout{8, 2, 128};
  const int32_t bs = 16, ctx = 40;
  LayerKvCache g{to_gpu(*gpu_, randn({3, 2, bs, 128}, rng_), dt_),
                 to_gpu(*gpu_, randn({3, 2, bs, 128}, rng_), dt_)};
  Tensor qkv = to_gpu(*gpu_, randn({1, layout.row_cols()}, rng_), dt_);
  const std::vector<int32_t> qs = {0, 1}, ctxs = {ctx};
  AttentionParams p;
  p.scale = 1.f / std::sqrt(128.f);
  gpu_->set_attention_kernel(K::kDecode);
  for (const std::vector<int32_t>& tables :
       {std::vector<int32_t>{0, 1, 7, 2}, std::vector<int32_t>{0, -1, 2, 2},
        std::vector<int32_t>{0, 1, 2, -1}}) {
    AttentionMeta m;
    m.query_start = to_gpu_i32(*gpu_, qs);
    m.context_lens = to_gpu_i32(*gpu_, ctxs);
    m.block_tables = to_gpu_i32(*gpu_, tables);
    m.num_seqs = 1;
    m.max_blocks_per_seq = 4;
    m.max_query_len = 1;
    m.max_context_len = ctx;
    Tensor out = gpu_->alloc({1, layout.q_cols()}, dt_);
    gpu_->attention(qkv, layout, g, m, p, out);
    EXPECT_EQ(gpu_->last_attention_kernel(), K::kDecode);
    if (tables[3] == -1)
      EXPECT_NO_THROW(gpu_->synchronize());
    else
      EXPECT_THROW(gpu_->synchronize(), Internal);
    EXPECT_NO_THROW(gpu_->synchronize());  // the error word was cleared
  }
  gpu_->set_attention_kernel(K::kAuto);
}

// Every kernel choice falls back to the simple kernel, which widens each query to its
// sequence's prefix: prompts with a context (long enough for key splits and several
// query tiles), a causal prompt beside them, decodes after a context.
TEST_P(CudaAttentionTest, BidirectionalPrefix) {
  for (const AttnCase& c :
       {AttnCase{
            "prefix, mha", 8, 8, 128, 16, {{0, 37, 36}, {0, 64, 64}, {0, 20, 0}, {300, 1, 290}}},
        AttnCase{
            "prefix, gqa hd 64 block 5", 8, 2, 64, 5, {{0, 700, 650}, {0, 3, 1}, {40, 1, 12}}}}) {
    run(c);
    EXPECT_EQ(ran_, std::vector<Kernel>{Kernel::kSimple}) << c.name << ": another kernel ran";
    EXPECT_EQ(auto_ran_, Kernel::kSimple) << c.name;
  }
}

// Every kernel choice falls back to the simple kernel, which narrows each query's view
// of the step's own keys to its tree mask: trees after cached contexts (long enough for
// key splits and several query tiles), a causal sequence beside them, a sliding window.
TEST_P(CudaAttentionTest, TreeMasks) {
  for (const AttnCase& c :
       {AttnCase{"tree, mha",
                 8,
                 8,
                 128,
                 16,
                 {{40, 9, 0, true}, {0, 20, 0, false}, {700, 70, 0, true}, {5, 1, 0, true}}},
        AttnCase{"tree, gqa hd 64 block 5", 8, 2, 64, 5, {{0, 33, 0, true}, {300, 12, 0, true}}},
        AttnCase{"tree, window", 4, 2, 64, 16, {{90, 40, 0, true}, {10, 3, 0, false}}, 24}}) {
    run(c);
    EXPECT_EQ(ran_, std::vector<Kernel>{Kernel::kSimple}) << c.name << ": another kernel ran";
    EXPECT_EQ(auto_ran_, Kernel::kSimple) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

// ---- an fp8 (e4m3) KV cache -----------------------------------------------------------

class CudaAttentionFp8Test : public CudaAttentionTest {
 protected:
  void SetUp() override {
    fp8_ = true;
    CudaAttentionTest::SetUp();
  }
};

// The cache's bytes after write_kv and the fused rotary + write: each the host's e4m3 of
// the value a 16-bit cache receives (the same rows through a 16-bit backend), for the
// vector and the element-wise rotary kernels, and slots that skip (-1).
TEST_P(CudaAttentionFp8Test, WritesRoundToE4m3) {
  const QkvLayout layout{4, 2, 64};
  const int32_t bs = 16, blocks = 4, T = 9;
  const Shape shape = {blocks, layout.num_kv_heads, bs, layout.head_dim};
  auto wide = make_gpu(dt_);
  Tensor rows = rounded(randn({T, layout.row_cols()}, rng_, 3.f), dt_);
  // Extremes: past the e4m3 range (saturates to 448), tiny (subnormal), exact midpoints.
  float* r = rows.data<float>();
  r[layout.q_cols()] = 1000.f;
  r[layout.q_cols() + 1] = -500.f;
  r[layout.q_cols() + 2] = 0.0029296875f;  // 1.5 * 2^-9: a subnormal midpoint
  r[layout.q_cols() + 3] = 1.0625f;        // midway between 1 and 1.125
  const std::vector<int32_t> slots = {5, 0, -1, 17, 63, 33, 2, -1, 40};
  Tensor cos_sin = Tensor::empty({T, 64}, DType::kF32);
  for (int64_t i = 0; i < cos_sin.numel(); ++i)
    cos_sin.data<float>()[i] = std::cos(0.37f * static_cast<float>(i));
  for (int mode = 0; mode < 3; ++mode) {  // write_kv; rotary half (vectors); rotary 2-D
    LayerKvCache g8{gpu_->alloc(shape, DType::kF8E4M3), gpu_->alloc(shape, DType::kF8E4M3)};
    LayerKvCache g16{wide->alloc(shape, dt_), wide->alloc(shape, dt_)};
    for (Tensor* t : {&g8.k, &g8.v}) gpu_->fill_zero(*t);
    for (Tensor* t : {&g16.k, &g16.v}) wide->fill_zero(*t);
    Tensor q8 = to_gpu(*gpu_, rows, dt_), q16 = to_gpu(*wide, rows, dt_);
    if (mode == 0) {
      gpu_->write_kv(q8, layout, to_gpu_i32(*gpu_, slots), g8);
      wide->write_kv(q16, layout, to_gpu_i32(*wide, slots), g16);
    } else {
      const RotaryStyle style = mode == 1 ? RotaryStyle::kHalf : RotaryStyle::kHalf2D;
      gpu_->rotary_write_kv(q8, layout, to_gpu(*gpu_, cos_sin, DType::kF32), style, 64,
                            to_gpu_i32(*gpu_, slots), g8);
      wide->rotary_write_kv(q16, layout, to_gpu(*wide, cos_sin, DType::kF32), style, 64,
                            to_gpu_i32(*wide, slots), g16);
    }
    for (int kv = 0; kv < 2; ++kv) {
      const Tensor& t8 = kv == 0 ? g8.k : g8.v;
      std::vector<uint8_t> bytes(static_cast<size_t>(t8.numel()));
      gpu_->download(t8, bytes.data());
      const std::vector<double> want = host_values(*wide, kv == 0 ? g16.k : g16.v);
      int64_t bad = 0;
      for (size_t i = 0; i < bytes.size(); ++i)
        bad += bytes[i] != f32_to_e4m3(static_cast<float>(want[i])) ? 1 : 0;
      EXPECT_EQ(bad, 0) << dtype_label(dt_) << " mode " << mode << (kv == 0 ? " k" : " v");
    }
  }
}

TEST_P(CudaAttentionFp8Test, Decode) {
  for (int hd : {64, 128, 256})
    for (int group : {1, 4, 8})
      run_decode({"fp8 decode hd " + std::to_string(hd) + " group " + std::to_string(group),
                  2 * group,
                  2,
                  hd,
                  16,
                  {{0, 1}, {15, 1}, {129, 1}, {1023, 1}, {3001, 1}}});
  run_decode(
      {"fp8 decode block 5, 24 seqs", 32, 8, 128, 5, std::vector<SeqSpec>(24, SeqSpec{517, 1})});
  run_decode({"fp8 decode llama-3-8b batch 1", 32, 8, 128, 16, {{1023, 1}}});
  run_decode({"fp8 decode three queries", 8, 2, 128, 16, {{1200, 3}, {40, 3}}});
  AttnCase hinted{"fp8 decode hint 8192", 32, 8, 128, 16, {{0, 1}, {999, 1}, {2999, 1}}};
  hinted.ctx_hint = 8192;
  run_decode(hinted);
}

// Prefill, chunked prefill (the cached prefix staged), a mixed step (decode rows from the
// fp8 cache, the others through flash from staged blocks), softcap and a sliding window,
// no host lengths (staging bounded by the device's lengths), block-table entries before
// a window unset.
TEST_P(CudaAttentionFp8Test, PrefillAndMixed) {
  // The flash kernel's forms on the staged 16-bit copy of the cache, too.
  if (cuda::attention_flash_wgmma_active(dt_, 128)) forms_ = wgmma_forms();
  run({"fp8 prefill", 8, 2, 128, 16, {{0, 37}, {0, 1}, {0, 130}}});
  forms_.clear();
  EXPECT_TRUE(ran(Kernel::kFlash) && ran(Kernel::kSimple));
  run({"fp8 chunked, block 5", 4, 2, 64, 5, {{100, 37}, {513, 64}, {31, 1}, {4, 6}}});
  run({"fp8 mixed prefill + decode", 8, 2, 128, 16, {{600, 1}, {0, 45}, {2100, 1}, {30, 9}}});
  EXPECT_EQ(auto_ran_, Kernel::kDecodeAndFlash);
  AttnCase w{"fp8 window + softcap", 8, 2, 128, 16, {{300, 40}, {50, 1}}};
  w.window = 64;
  w.softcap = 30.f;
  run(w);
  AttnCase no_host{"fp8 prefill, no host lengths", 8, 2, 128, 16, {{70, 20}, {0, 33}, {9, 1}}};
  no_host.no_host_lens = true;
  run(no_host);
  // Table entries before a sliding window unset (-1): staging neither reads nor reports
  // them; with and without host lengths.
  AttnCase freed{"fp8 window 40, entries before it unset", 8, 2, 128, 16,
                 {{500, 90}, {1000, 1}, {63, 20}}};
  freed.window = 40;
  freed.unset_before_window = true;
  run(freed);
  freed.name += ", no host lengths";
  freed.no_host_lens = true;
  run(freed);
}

// An fp8 cache with f32 compute is refused at construction.
TEST(CudaAttentionFp8, F32ComputeRefused) {
  TACHYON_REQUIRE_GPU();
  EXPECT_THROW(make_gpu(DType::kF32, /*kv_fp8=*/true), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionFp8Test, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
