// Paged attention on the GPU against the CPU backend: prefill, chunked prefill, decode
// (the split-K path), mixed batches; head_dim 64..256; GQA ratios 1, 4, 8 and MQA;
// block boundaries (odd block sizes); sliding window, softcapping, ALiBi; a bidirectional
// prefix (ChatGLM-6B's prompt context: the simple kernel only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/ops.h"
#include "cuda/cuda_test_util.h"

namespace tachyon::cuda_test {
namespace {

struct SeqSpec {
  int32_t cached;      // tokens already in the cache
  int32_t q_len;       // tokens of this step
  int32_t prefix = 0;  // a bidirectional prefix (AttentionMeta::prefix_lens)
};

struct AttnCase {
  std::string name;
  int32_t heads, kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  int32_t window = 0;
  float softcap = 0.f;
  bool alibi = false;
  bool alibi_bf16 = false;
};

class CudaAttentionTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TACHYON_REQUIRE_GPU();
    dt_ = GetParam();
    gpu_ = make_gpu(dt_);
    cpu_ = make_cpu_backend();
    rng_.seed(99);
  }

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
    Tensor zero = Tensor::zeros(cache_shape, DType::kF32);
    LayerKvCache ref{zero.clone(), zero.clone()};
    LayerKvCache g{to_gpu(*gpu_, zero, dt_), to_gpu(*gpu_, zero, dt_)};
    auto host_i32 = [](const std::vector<int32_t>& v) {
      Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
      std::copy(v.begin(), v.end(), t.data<int32_t>());
      return t;
    };
    if (!pre_slots.empty()) {
      Tensor pre =
          rounded(randn({static_cast<int64_t>(pre_slots.size()), layout.row_cols()}, rng_), dt_);
      cpu_->write_kv(pre, layout, host_i32(pre_slots), ref);
      gpu_->write_kv(to_gpu(*gpu_, pre, dt_), layout, to_gpu_i32(*gpu_, pre_slots), g);
    }
    const int64_t T = qstart.back();
    Tensor qkv = rounded(randn({T, layout.row_cols()}, rng_), dt_);
    Tensor qkv_g = to_gpu(*gpu_, qkv, dt_);
    cpu_->write_kv(qkv, layout, host_i32(step_slots), ref);
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
      m->max_context_len = max_ctx;
    }
    std::vector<int32_t> prefix;
    for (const SeqSpec& s : c.seqs) prefix.push_back(s.prefix);
    if (std::any_of(prefix.begin(), prefix.end(), [](int32_t p) { return p > 0; })) {
      mh.prefix_lens = host_i32(prefix);
      mg.prefix_lens = to_gpu_i32(*gpu_, prefix);
      mh.host_prefix_lens = mg.host_prefix_lens = &prefix;
    }
    Tensor out_ref = Tensor::empty({T, layout.q_cols()}, DType::kF32);
    cpu_->attention(qkv, layout, ref, mh, p, out_ref);
    using K = cuda::CudaBackend::AttentionKernel;
    mg.host_query_start = &qstart;
    mg.host_context_lens = &ctx;
    for (K kernel : {K::kSimple, K::kMma, K::kDecode, K::kGemm}) {
      gpu_->set_attention_kernel(kernel);
      Tensor out = poisoned(*gpu_, {T, layout.q_cols()}, dt_);
      gpu_->attention(qkv_g, layout, g, mg, pg, out);
      if (gpu_->last_attention_kernel() != kernel) continue;  // not applicable here
      const char* kname = kernel == K::kMma      ? " mma "
                          : kernel == K::kDecode ? " decode "
                          : kernel == K::kGemm   ? " gemm "
                                                 : " simple ";
      expect_near(host_values(*gpu_, out), host_values(out_ref), bound_for(dt_),
                  dtype_label(dt_) + kname + c.name);
    }
    gpu_->set_attention_kernel(K::kAuto);
  }

  DType dt_ = DType::kBF16;
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

// Whole-prompt prefill through cuBLAS: several sequences of different lengths, GQA,
// head_dim 64 and 128, a prompt long enough to be split into row chunks.
TEST_P(CudaAttentionTest, GemmPrefill) {
  run({"gemm prefill gqa 4", 32, 8, 128, 16, {{0, 300}, {0, 1}, {0, 129}, {0, 1030}}});
  run({"gemm prefill mha hd 64", 8, 8, 64, 16, {{0, 517}, {0, 64}}});
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

// Every kernel choice falls back to the simple kernel, which widens each query to its
// sequence's prefix: prompts with a context (long enough for key splits and several
// query tiles), a causal prompt beside them, decodes after a context.
TEST_P(CudaAttentionTest, BidirectionalPrefix) {
  run({"prefix, mha", 8, 8, 128, 16, {{0, 37, 36}, {0, 64, 64}, {0, 20, 0}, {300, 1, 290}}});
  run({"prefix, gqa hd 64 block 5", 8, 2, 64, 5, {{0, 700, 650}, {0, 3, 1}, {40, 1, 12}}});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
