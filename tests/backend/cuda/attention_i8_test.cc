// An int8 KV cache on the GPU (each row's int8 values and its f32 scale max|x| / 127):
// the writes against the CPU backend's bytes, and attention through every kernel (on the
// step's blocks staged as 16-bit elements) against the CPU backend attending over its
// own int8 cache of the same rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/attention_test_util.h"
#include "core/error.h"

namespace tachyon::cuda_test {
namespace {

class CudaAttentionI8Test : public CudaAttentionTest {
 protected:
  void SetUp() override {
    i8_ = true;
    CudaAttentionTest::SetUp();
  }
};

// write_kv and rotary_write_kv (rotated by the GPU's rotary, then written) give the CPU
// backend's bytes for the same rows: values and scales, skipped slots (-1) untouched,
// a zero row (scale 0) and rows of one large value.
TEST_P(CudaAttentionI8Test, WritesMatchCpu) {
  const QkvLayout layout{4, 2, 64};
  const int32_t bs = 16, blocks = 4, T = 9;
  const Shape shape = kv_cache_shape(DType::kI8, blocks, layout.num_kv_heads, bs, layout.head_dim);
  Tensor rows = rounded(randn({T, layout.row_cols()}, rng_, 3.f), dt_);
  float* r = rows.data<float>();
  for (int64_t d = 0; d < layout.head_dim; ++d) r[layout.q_cols() + d] = 0.f;  // a zero row
  r[layout.row_cols() + layout.q_cols() + 5] = 1000.f;
  const std::vector<int32_t> slots = {5, 0, -1, 17, 63, 33, 2, -1, 40};
  Tensor cos_sin = Tensor::empty({T, 64}, DType::kF32);
  for (int64_t i = 0; i < cos_sin.numel(); ++i)
    cos_sin.data<float>()[i] = std::cos(0.37f * static_cast<float>(i));
  for (int mode = 0; mode < 2; ++mode) {  // write_kv; rotary_write_kv
    LayerKvCache g{gpu_->alloc(shape, DType::kI8), gpu_->alloc(shape, DType::kI8)};
    for (Tensor* t : {&g.k, &g.v}) gpu_->fill_zero(*t);
    LayerKvCache c{Tensor::zeros(shape, DType::kI8), Tensor::zeros(shape, DType::kI8)};
    Tensor qg = to_gpu(*gpu_, rows, dt_);
    Tensor host_rows = rows;
    if (mode == 1) {
      gpu_->rotary_write_kv(qg, layout, to_gpu(*gpu_, cos_sin, DType::kF32), RotaryStyle::kHalf, 64,
                            to_gpu_i32(*gpu_, slots), g);
      host_rows = gpu_->to_host(qg).to(DType::kF32);  // the rows the GPU rotated
    } else {
      gpu_->write_kv(qg, layout, to_gpu_i32(*gpu_, slots), g);
    }
    Tensor hs = Tensor::empty({T}, DType::kI32);
    std::memcpy(hs.raw(), slots.data(), slots.size() * 4);
    cpu_->write_kv(host_rows, layout, hs, c);
    for (int kv = 0; kv < 2; ++kv) {
      const Tensor& t = kv == 0 ? g.k : g.v;
      const Tensor& want = kv == 0 ? c.k : c.v;
      std::vector<uint8_t> bytes(t.nbytes());
      gpu_->download(t, bytes.data());
      int64_t bad = 0;
      for (size_t i = 0; i < bytes.size(); ++i)
        bad += bytes[i] != static_cast<const uint8_t*>(want.raw())[i] ? 1 : 0;
      EXPECT_EQ(bad, 0) << dtype_label(dt_) << " mode " << mode << (kv == 0 ? " k" : " v");
    }
  }
}

TEST_P(CudaAttentionI8Test, Decode) {
  for (int hd : {64, 128})
    for (int group : {1, 4})
      run_decode({"int8 decode hd " + std::to_string(hd) + " group " + std::to_string(group),
                  2 * group,
                  2,
                  hd,
                  16,
                  {{0, 1}, {15, 1}, {129, 1}, {1023, 1}}});
  run_decode({"int8 decode llama-3-8b batch 4", 32, 8, 128, 16, std::vector<SeqSpec>(4, {700, 1})});
}

// Prefill, chunked prefill, a mixed step, a sliding window with softcap, no host lengths,
// table entries before a window unset.
TEST_P(CudaAttentionI8Test, PrefillAndMixed) {
  run({"int8 prefill", 8, 2, 128, 16, {{0, 37}, {0, 1}, {0, 130}}});
  EXPECT_TRUE(ran(Kernel::kSimple));
  run({"int8 chunked, block 5", 4, 2, 64, 5, {{100, 37}, {513, 64}, {31, 1}, {4, 6}}});
  run({"int8 mixed prefill + decode", 8, 2, 128, 16, {{600, 1}, {0, 45}, {2100, 1}, {30, 9}}});
  AttnCase w{"int8 window + softcap", 8, 2, 128, 16, {{300, 40}, {50, 1}}};
  w.window = 64;
  w.softcap = 30.f;
  run(w);
  AttnCase no_host{"int8 prefill, no host lengths", 8, 2, 128, 16, {{70, 20}, {0, 33}, {9, 1}}};
  no_host.no_host_lens = true;
  run(no_host);
  // Table entries before a sliding window unset (-1): staging neither reads nor reports
  // them.
  AttnCase freed{"int8 window 40, entries before it unset", 8, 2, 128, 16,
                 {{500, 90}, {1000, 1}, {63, 20}}};
  freed.window = 40;
  freed.unset_before_window = true;
  run(freed);
}

// An int8 cache with f32 compute is refused at construction.
TEST(CudaAttentionI8, F32ComputeRefused) {
  TACHYON_REQUIRE_GPU();
  EXPECT_THROW(make_gpu_kv(DType::kF32, DType::kI8), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionI8Test, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
