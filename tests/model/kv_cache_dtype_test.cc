// The CPU's KV cache in bf16, fp8 and int8 against its f32 cache on the bundled trained model
// (models/tiny-kjv-chat): the bytes a block takes, the greedy tokens, and the logits
// of every step along the f32 cache's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "model/loader.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kSteps = 48;

std::unique_ptr<Model> load_kjv(DType kv) {
  LoadOptions opts;
  opts.device = Device{};  // the CPU wherever the test runs
  opts.dtype = DType::kF32;
  opts.kv_cache_dtype = kv;
  auto model = load_model(std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat", opts);
  model->init_kv_cache(64, kBlock);
  return model;
}

// The prompt, then kSteps decode steps: each step's logits; the step's token is
// forced[i] when given, else the greedy one (appended to `tokens`).
std::vector<std::vector<float>> run(Model& model, std::vector<int32_t>& tokens,
                                    const std::vector<int32_t>* forced) {
  std::vector<std::vector<float>> all;
  const int64_t vocab = model.vocab_size();
  int32_t computed = 0;
  for (int32_t step = 0; step < kSteps; ++step) {
    const ForwardBatch b = testing_util::next_step(tokens, computed, kBlock, 64);
    const int32_t n = b.num_tokens();
    Tensor logits = model.forward(b);
    computed += n;
    const float* p = logits.data<float>();
    all.emplace_back(p, p + vocab);
    const int32_t greedy = static_cast<int32_t>(std::max_element(p, p + vocab) - p);
    tokens.push_back(forced != nullptr ? (*forced)[tokens.size()] : greedy);
  }
  return all;
}

TEST(KvCacheDtype, BytesPerBlockFollowTheType) {
  const size_t f32 = load_kjv(DType::kF32)->kv_bytes_per_block(kBlock);
  const auto bf16 = load_kjv(DType::kBF16);
  const auto i8 = load_kjv(DType::kI8);
  const ModelConfig& c = bf16->config();
  EXPECT_EQ(bf16->kv_bytes_per_block(kBlock) * 2, f32);
  EXPECT_EQ(load_kjv(DType::kF8E4M3)->kv_bytes_per_block(kBlock) * 4, f32);
  // int8: head_dim bytes and a 4-byte scale per token, KV head, K or V, layer.
  size_t rows = 0;
  for (int l = 0; l < c.layer_num; ++l) rows += 2 * static_cast<size_t>(c.kv_heads(l)) * kBlock;
  EXPECT_EQ(i8->kv_bytes_per_block(kBlock), rows * (static_cast<size_t>(c.size_per_head) + 4));
  EXPECT_EQ(f32, rows * static_cast<size_t>(c.size_per_head) * 4);
}

// Blocks copied, swapped out and in, and a grown cache serve a sequence as the blocks
// it was written in do: bit for bit, in every CPU cache type (the int8 rows' scales
// travel with their blocks).
TEST(KvCacheDtype, BlocksCopySwapAndGrowInEveryType) {
  using testing_util::one_seq;
  const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77, 5, 4};
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kI8}) {
    SCOPED_TRACE(dtype_name(kv));
    LoadOptions opts;
    opts.device = Device{};
    opts.kv_cache_dtype = kv;
    auto m = load_model(testing_util::fixture("llama"), opts);
    ASSERT_EQ(m->backend().kv_dtype(), kv);
    m->init_kv_cache(4, 4);
    m->forward(one_seq(prompt, 0, {0, 1, 2}));
    m->grow_kv_cache(16);  // blocks 0..2 kept
    m->copy_kv_blocks({{0, 9}, {1, 12}, {2, 13}});
    ASSERT_TRUE(m->init_kv_swap(4));
    m->swap_kv_blocks({{0, 3}, {1, 0}, {2, 1}}, {});
    m->swap_kv_blocks({}, {{3, 5}, {0, 6}, {1, 7}});
    const Tensor want = m->forward(one_seq({55}, 10, {0, 1, 2}));
    for (const std::vector<int32_t>& blocks :
         {std::vector<int32_t>{9, 12, 13}, std::vector<int32_t>{5, 6, 7}}) {
      const Tensor got = m->forward(one_seq({55}, 10, blocks));
      ASSERT_EQ(got.numel(), want.numel());
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
    }
  }
}

TEST(KvCacheDtype, OnlyCpuTypesLoadOnTheCpu) {
  EXPECT_THROW(load_kjv(DType::kF16), InvalidArgument);  // no CPU cache type
}

// What a cache type must keep of the f32 cache's results, over the reference prompts
// (tests/engine/data/kjv_reference.json), kSteps decode steps each.
struct Bounds {
  double logits;      // max |logit - f32's| / max |f32's logit| at any step
  int min_same_top;   // steps (of kSteps, a prompt) along f32's tokens with its argmax
  int min_agree_all;  // greedy tokens equal to f32's before the first difference, summed
};

// Greedy tokens (how many agree with the f32 cache's before they part), and along the
// f32 cache's tokens every step's logits and argmax.
void compare(DType kv, const Bounds& bound) {
  const std::string root = TACHYON_SOURCE_DIR;
  Json ref = load_json_file(root + "/tests/engine/data/kjv_reference.json");
  auto base = load_kjv(DType::kF32);
  auto model = load_kjv(kv);
  int agree_all = 0, prompts = 0;
  for (const Json& c : ref["models"]["tiny-kjv-chat"]) {
    const std::vector<int32_t> prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const size_t p0 = prompt.size();
    std::vector<int32_t> want = prompt;
    const auto want_logits = run(*base, want, nullptr);
    std::vector<int32_t> got = prompt;
    run(*model, got, nullptr);
    int agree = 0;
    while (agree < kSteps && got[p0 + agree] == want[p0 + agree]) ++agree;
    std::vector<int32_t> forced = prompt;
    const auto logits = run(*model, forced, &want);
    double worst = 0;
    int same_top = 0;
    for (int s = 0; s < kSteps; ++s) {
      const std::vector<float>& a = logits[s];
      const std::vector<float>& b = want_logits[s];
      double mx = 0, diff = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        mx = std::max(mx, std::fabs(double{b[i]}));
        diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
      }
      worst = std::max(worst, diff / mx);
      same_top += std::max_element(a.begin(), a.end()) - a.begin() ==
                  std::max_element(b.begin(), b.end()) - b.begin();
    }
    std::printf(
        "  %s: greedy tokens equal to f32's: first %d of %d; along f32's tokens: "
        "max |logit diff| / max |logit| %.2e, same argmax %d of %d\n",
        std::string(dtype_name(kv)).c_str(), agree, kSteps, worst, same_top, kSteps);
    EXPECT_LE(worst, bound.logits) << c["prompt"].get<std::string>();
    EXPECT_GE(same_top, bound.min_same_top) << c["prompt"].get<std::string>();
    agree_all += agree;
    ++prompts;
  }
  std::printf("  %s: %d of %d greedy tokens before the first difference\n",
              std::string(dtype_name(kv)).c_str(), agree_all, prompts * kSteps);
  EXPECT_GE(agree_all, bound.min_agree_all);
}

// Measured (7 prompts, 48 steps): bf16 every token equal, logits within 1.3e-2 of the
// largest; int8 234 of 336 tokens before the first difference (4 prompts all 48), the
// argmax along f32's tokens at 46-48 of 48 steps, logits within 4.6e-2.
TEST(KvCacheDtype, Bf16MatchesF32) {
  compare(DType::kBF16, {2e-2, kSteps, 7 * kSteps});
}

// fp8 (e4m3, no scale: 3 mantissa bits): 218 of 336 tokens before the first difference
// (4 prompts all 48), the argmax along f32's tokens at 40-48 of 48 steps, logits within
// 1.7e-1 of the largest.
TEST(KvCacheDtype, Fp8MatchesF32) {
  compare(DType::kF8E4M3, {2.2e-1, kSteps - 10, 180});
}

TEST(KvCacheDtype, Int8MatchesF32) {
  compare(DType::kI8, {6e-2, kSteps - 4, 200});
}

}  // namespace
}  // namespace tachyon
