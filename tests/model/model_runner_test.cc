// Runner behaviour the engine relies on: copied KV blocks serve a forked sequence,
// released blocks outside a sliding window are not read, logits rows are honoured.
#include <gtest/gtest.h>

#include "model/loader.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

using testing_util::fixture;
using testing_util::one_seq;

TEST(ModelRunner, CopiedBlocksServeAForkedSequence) {
  auto m = load_model(fixture("llama"));
  m->init_kv_cache(16, 4);
  const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77};
  m->forward(one_seq(prompt, 0, {0, 1, 2}));
  m->copy_kv_blocks({{0, 9}, {1, 12}});
  Tensor forked = m->forward(one_seq({55}, 8, {9, 12, 3}));
  Tensor original = m->forward(one_seq({55}, 8, {0, 1, 2}));
  ASSERT_EQ(forked.numel(), original.numel());
  for (int64_t i = 0; i < forked.numel(); ++i)
    EXPECT_EQ(forked.data<float>()[i], original.data<float>()[i]);
}

TEST(ModelRunner, SlidingWindowIgnoresReleasedBlocks) {
  // Mistral fixture: window 8 on every layer. Blocks wholly before the window of the
  // step's first query may be released (-1) without changing the result.
  auto m = load_model(fixture("mistral"));
  ASSERT_EQ(m->config().sliding_window, 8);
  m->init_kv_cache(16, 4);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 20; ++i) tokens.push_back(3 + 17 * i % 500);
  m->forward(one_seq(tokens, 0, {0, 1, 2, 3, 4, 5}));
  Tensor full = m->forward(one_seq({42}, 20, {0, 1, 2, 3, 4, 5}));
  // The query sits at index 20 and sees keys 13..20: blocks 0..2 (keys 0..11) unused.
  Tensor released = m->forward(one_seq({42}, 20, {-1, -1, -1, 3, 4, 5}));
  for (int64_t i = 0; i < full.numel(); ++i)
    EXPECT_EQ(full.data<float>()[i], released.data<float>()[i]);
  // A model with full-attention layers still needs every block.
  auto llama = load_model(fixture("llama"));
  llama->init_kv_cache(16, 4);
  EXPECT_THROW(llama->forward(one_seq({42}, 0, {-1})), InvalidArgument);
}

// The CPU cache grows keeping its blocks: a sequence written before the growth goes on
// in blocks past the old end and gives the logits of a cache reserved whole.
TEST(ModelRunner, GrownCacheKeepsItsBlocks) {
  const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77};
  auto whole = load_model(fixture("llama"));
  whole->init_kv_cache(16, 4);
  whole->forward(one_seq(prompt, 0, {0, 1}));
  Tensor want = whole->forward(one_seq({55, 56, 57, 58, 59}, 8, {0, 1, 12, 13}));

  auto m = load_model(fixture("llama"));
  ASSERT_TRUE(m->can_grow_kv_cache());
  m->init_kv_cache(2, 4);
  m->forward(one_seq(prompt, 0, {0, 1}));
  EXPECT_THROW(m->forward(one_seq({55}, 8, {0, 1, 12})), InvalidArgument);
  EXPECT_THROW(m->grow_kv_cache(1), InvalidArgument);
  m->grow_kv_cache(16);
  Tensor got = m->forward(one_seq({55, 56, 57, 58, 59}, 8, {0, 1, 12, 13}));
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
}

TEST(ModelRunner, LogitsRowsInRequestedOrder) {
  auto m = load_model(fixture("qwen2"));
  m->init_kv_cache(8, 4);
  ForwardBatch b = one_seq({5, 6, 7, 8, 9}, 0, {0, 1});
  b.logits_rows = {4, 0, 2};
  Tensor l = m->forward(b);
  ASSERT_EQ(l.shape(), (Shape{3, m->vocab_size()}));
  m->init_kv_cache(8, 4);
  b.logits_rows = {0, 1, 2, 3, 4};
  Tensor all = m->forward(b);
  const int64_t v = m->vocab_size();
  for (int r = 0; r < 3; ++r) {
    const int src = b.logits_rows[r == 0 ? 4 : r == 1 ? 0 : 2];
    for (int64_t i = 0; i < v; ++i)
      EXPECT_EQ(l.data<float>()[r * v + i], all.data<float>()[src * v + i]);
  }
}

}  // namespace
}  // namespace tachyon
