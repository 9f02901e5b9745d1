// The decode kernel (attention_decode.cu) against the CPU backend: the split-K path,
// its template shapes, tile, split and pipeline edges, the Llama-3-8B shape, long
// contexts, many sequences, several queries per sequence, bucketed context hints, bad
// block ids.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/attention_test_util.h"
#include "core/error.h"

namespace tachyon::cuda_test {
namespace {

#define TACHYON_SKIP_F32()                                                          \
  do {                                                                              \
    if (dt_ == DType::kF32) GTEST_SKIP() << "the decode kernel takes bf16 and f16"; \
  } while (0)

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

}  // namespace
}  // namespace tachyon::cuda_test
