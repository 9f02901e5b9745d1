// The FlashAttention-2 kernel (attention_flash*.cu) against the CPU backend, with cases
// shaped around its tiles (128 rows of query x head, 64 keys); on Hopper each runs with
// and without its wgmma form.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/attention_test_util.h"

namespace tachyon::cuda_test {
namespace {

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

}  // namespace
}  // namespace tachyon::cuda_test
