// Paged attention on the GPU against the CPU backend (attention.cu: the simple kernel
// and the choice between kernels): prefill, chunked prefill, mixed batches; head_dim
// 64..256; GQA ratios 1, 4, 8 and MQA; block boundaries (odd block sizes); sliding
// window, softcapping, ALiBi; tree masks over a step's own tokens (speculative
// verification: the simple and decode kernels); a bidirectional prefix (ChatGLM-6B's prompt
// context: the simple kernel only). Every case runs through each kernel that applies to it. The
// flash kernel's own cases are in attention_flash_test.cc, the decode kernel's in
// attention_decode_test.cc, an fp8 KV cache's in attention_fp8_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/attention_test_util.h"

namespace tachyon::cuda_test {
namespace {

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

// Every kernel choice falls back to the simple kernel, which widens each query to its
// sequence's prefix: prompts with a context (long enough for key splits and several
// query tiles), a causal prompt beside them, decodes after a context.
// Tree masks narrow each query's view of the step's own keys: the simple kernel and (in
// bf16/f16) the decode kernel take them, never flash; trees after cached contexts (long
// enough for key splits and several query tiles), a causal sequence beside them, a
// sliding window. Steps of up to 16 queries a sequence go to the decode kernel, longer
// ones to the simple kernel.
TEST_P(CudaAttentionTest, TreeMasks) {
  const bool half = dt_ != DType::kF32;
  for (const AttnCase& c :
       {AttnCase{"tree, mha",
                 8,
                 8,
                 128,
                 16,
                 {{40, 9, 0, true}, {0, 20, 0, false}, {700, 70, 0, true}, {5, 1, 0, true}}},
        AttnCase{"tree, gqa hd 64 block 5", 8, 2, 64, 5, {{0, 33, 0, true}, {300, 12, 0, true}}},
        AttnCase{"tree, window", 4, 2, 64, 16, {{90, 40, 0, true}, {10, 3, 0, false}}, 24},
        AttnCase{"short trees, gqa 4",
                 32,
                 8,
                 128,
                 16,
                 {{40, 9, 0, true}, {700, 16, 0, true}, {5, 1, 0, true}, {30, 4, 0, false}}},
        AttnCase{"short trees, gqa 8 hd 64 block 5",
                 16,
                 2,
                 64,
                 5,
                 {{1200, 16, 0, true}, {3, 5, 0, true}}}}) {
    run(c);
    EXPECT_FALSE(ran(Kernel::kFlash)) << c.name;
    EXPECT_EQ(ran(Kernel::kDecode), half) << c.name;
    int32_t longest = 0;
    for (const SeqSpec& q : c.seqs) longest = std::max(longest, q.q_len);
    EXPECT_EQ(auto_ran_, half && longest <= 16 ? Kernel::kDecode : Kernel::kSimple) << c.name;
  }
}

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

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
