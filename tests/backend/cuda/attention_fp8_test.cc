// An fp8 (e4m3) KV cache: the writes against the host's rounding, and attention through
// every kernel (the decode kernel reading e4m3, the others staged blocks) against the
// CPU backend on the rounded keys and values.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/attention_test_util.h"
#include "core/error.h"

namespace tachyon::cuda_test {
namespace {

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
