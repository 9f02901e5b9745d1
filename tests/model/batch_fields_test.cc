// The optional per-row fields of a step's batch (model/forward.h) on the CPU: injected
// embeddings, returned hidden states, KV prefix blocks, tree masks, adapter ids; and
// their refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/loader.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

using testing_util::expect_invalid;
using testing_util::fixture;
using testing_util::one_seq;

// Two sequences computed from position 0 (prompts a and b in blocks {0, 1} and {2, 3}),
// the logits of every row.
ForwardBatch two_prompts(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  ForwardBatch f;
  const int32_t na = static_cast<int32_t>(a.size()), nb = static_cast<int32_t>(b.size());
  f.token_ids = a;
  f.token_ids.insert(f.token_ids.end(), b.begin(), b.end());
  for (int32_t i = 0; i < na; ++i) f.positions.push_back(i);
  for (int32_t i = 0; i < nb; ++i) f.positions.push_back(i);
  f.query_start = {0, na, na + nb};
  f.context_lens = {na, nb};
  f.block_tables = {0, 1, 2, 3};
  f.max_blocks_per_seq = 2;
  for (int32_t r = 0; r < na + nb; ++r) f.logits_rows.push_back(r);
  return f;
}

// What the token embedding lookup gives for token_ids[row .. row + n) (scaled), f32.
Tensor looked_up(Model& m, const ForwardBatch& b, int32_t row, int32_t n) {
  const Tensor table = m.weights().embedding.to(DType::kF32);
  const int64_t d = table.dim(1);
  const float scale = static_cast<float>(m.config().embedding_scale);
  Tensor out = Tensor::empty({n, d}, DType::kF32);
  for (int32_t i = 0; i < n; ++i) {
    const float* src = table.data<float>() + int64_t{b.token_ids[row + i]} * d;
    for (int64_t c = 0; c < d; ++c) out.data<float>()[i * d + c] = scale * src[c];
  }
  return out;
}

bool rows_equal(const Tensor& x, const Tensor& y, int64_t row) {
  const int64_t v = x.dim(1);
  for (int64_t i = 0; i < v; ++i)
    if (x.data<float>()[row * v + i] != y.data<float>()[row * v + i]) return false;
  return true;
}

class InjectedEmbeddingsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InjectedEmbeddingsTest, TableRowsReproduceAndOtherValuesChangeTheirSequenceOnly) {
  auto m = load_model(fixture(GetParam()));
  m->init_kv_cache(8, 4);
  const ForwardBatch plain = two_prompts({11, 200, 37, 480, 9, 9}, {301, 77, 5, 6, 7});
  const Tensor base = m->forward(plain);

  // The rows the table itself gives: the same logits, bit for bit.
  ForwardBatch same = plain;
  same.embeddings = {{1, looked_up(*m, plain, 1, 3)}, {7, looked_up(*m, plain, 7, 2)}};
  const Tensor same_logits = m->forward(same);
  ASSERT_EQ(same_logits.shape(), base.shape());
  for (int64_t r = 0; r < base.dim(0); ++r) EXPECT_TRUE(rows_equal(base, same_logits, r)) << r;

  // Other values at rows 2..3 of the first sequence: its rows from 2 on change, its rows
  // before and the second sequence's do not.
  ForwardBatch other = plain;
  Tensor v = looked_up(*m, plain, 2, 2);
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = 0.05f * std::sin(0.7f * i);
  other.embeddings = {{2, v}};
  const Tensor changed = m->forward(other);
  for (int64_t r = 0; r < 2; ++r) EXPECT_TRUE(rows_equal(base, changed, r)) << r;
  for (int64_t r = 2; r < 6; ++r) EXPECT_FALSE(rows_equal(base, changed, r)) << r;
  for (int64_t r = 6; r < 11; ++r) EXPECT_TRUE(rows_equal(base, changed, r)) << r;
}

// A plain decoder, one with an embedding scale (Gemma), and one with learned positions
// and embeddings projected in (OPT-350m's layout).
INSTANTIATE_TEST_SUITE_P(Models, InjectedEmbeddingsTest,
                         ::testing::Values("llama", "gemma", "opt_project_postln"));

TEST(InjectedEmbeddings, BadOnesAreRefusedAndChangeNothing) {
  auto m = load_model(fixture("llama"));
  m->init_kv_cache(8, 4);
  const ForwardBatch plain = two_prompts({11, 200, 37}, {301, 77});
  const int64_t d = m->config().embed_dim();
  m->forward(plain);
  const Tensor before = m->forward(one_seq({42}, 3, {0, 1}));
  auto refused = [&](std::vector<InjectedEmbeddings> e, const char* needle) {
    ForwardBatch b = one_seq({42}, 3, {0, 1});
    b.token_ids = {9};  // would change the cache were the step run
    b.embeddings = std::move(e);
    expect_invalid([&] { m->forward(b); }, needle);
  };
  refused({{0, Tensor::zeros({1, d + 1}, DType::kF32)}}, "injected embeddings");
  refused({{0, Tensor::zeros({1, d}, DType::kBF16)}}, "injected embeddings");
  refused({{0, Tensor()}}, "injected embeddings");
  refused({{0, Tensor::zeros({2, d}, DType::kF32)}}, "out of [0, 1)");
  refused({{-1, Tensor::zeros({1, d}, DType::kF32)}}, "out of [0, 1)");
  refused({{0, Tensor::zeros({1, d}, DType::kF32)}, {0, Tensor::zeros({1, d}, DType::kF32)}},
          "twice");
  // The cache is as before: the same step gives the same logits.
  const Tensor after = m->forward(one_seq({42}, 3, {0, 1}));
  EXPECT_TRUE(rows_equal(before, after, 0));
}

// The LM head's matrix of a fixture [V, D] f32 (the tied embedding table, or the
// checkpoint's lm_head.weight).
Tensor lm_head_of(Model& m, const std::string& name) {
  if (m.config().tie_word_embeddings) return m.weights().embedding.to(DType::kF32);
  return Checkpoint::open(fixture(name))->get("lm_head.weight").to(DType::kF32);
}

class HiddenStatesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HiddenStatesTest, LmHeadOfTheHiddenStatesIsTheLogits) {
  const std::string name = GetParam();
  auto m = load_model(fixture(name));
  ASSERT_EQ(m->config().final_softcap, 0.0);
  m->init_kv_cache(8, 4);
  ForwardBatch b = two_prompts({11, 200, 37, 480, 9}, {301, 77, 5});
  b.logits_rows = {4, 1, 7, 4};
  b.hidden_rows = b.logits_rows;
  const ForwardOutput out = m->forward_sample(b);
  const int64_t d = m->config().embed_dim(), v = m->vocab_size();
  ASSERT_EQ(out.hidden.shape(), (Shape{4, d}));
  ASSERT_EQ(out.hidden.dtype(), DType::kF32);
  ASSERT_EQ(out.logits.shape(), (Shape{4, v}));
  const Tensor w = lm_head_of(*m, name);
  ASSERT_EQ(w.shape(), (Shape{v, d}));
  Tensor bias;
  if (m->weights().lm_head.b) bias = m->weights().lm_head.b.to(DType::kF32);
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t t = 0; t < v; ++t) {
      double dot = bias ? bias.data<float>()[t] : 0.0;
      for (int64_t c = 0; c < d; ++c)
        dot += double{out.hidden.data<float>()[r * d + c]} * w.data<float>()[t * d + c];
      const float logit = out.logits.data<float>()[r * v + t];
      EXPECT_NEAR(logit, dot, 1e-4 * (1.0 + std::fabs(dot))) << name << " row " << r << " " << t;
    }
  }
  // Rows 0 and 3 are the same row of the step.
  for (int64_t c = 0; c < d; ++c)
    EXPECT_EQ(out.hidden.data<float>()[c], out.hidden.data<float>()[3 * d + c]);

  // None asked for: none returned; a row out of the step is refused.
  b.hidden_rows.clear();
  EXPECT_FALSE(m->forward_sample(b).hidden);
  b.hidden_rows = {8};
  expect_invalid([&] { m->forward_sample(b); }, "hidden row 8 out of [0, 8)");
}

// A plain decoder, one whose final norm is absent (OPT post-LN) and whose output is
// projected before the LM head, and one whose logits rows gather after a final norm.
INSTANTIATE_TEST_SUITE_P(Models, HiddenStatesTest,
                         ::testing::Values("llama", "opt_project_postln", "qwen2"));

// A prefix is KV blocks at the head of a block table; each token's cache slot is its
// cache index, whatever its position.
TEST(KvPrefix, ReusedBlocksAsAPrefixGiveTheSameLogits) {
  for (const char* name : {"llama", "opt", "bloom"}) {  // rotary, learned, ALiBi
    auto m = load_model(fixture(name));
    m->init_kv_cache(16, 4);
    const std::vector<int32_t> prefix = {11, 200, 37, 480, 9, 9, 301, 77};  // two blocks
    const std::vector<int32_t> tail = {5, 6, 7, 8, 9};
    std::vector<int32_t> whole = prefix;
    whole.insert(whole.end(), tail.begin(), tail.end());
    ForwardBatch normal = one_seq(whole, 0, {0, 1, 2, 3});
    normal.logits_rows = {8, 9, 10, 11, 12};
    const Tensor expected = m->forward(normal);

    // The prefix alone in blocks 4, 5; then the tail in a sequence that starts with them.
    m->forward(one_seq(prefix, 0, {4, 5}));
    ForwardBatch reused = one_seq(tail, 8, {4, 5, 6, 7});
    reused.logits_rows = {0, 1, 2, 3, 4};
    const Tensor got = m->forward(reused);
    ASSERT_EQ(got.shape(), expected.shape());
    for (int64_t i = 0; i < got.numel(); ++i)
      EXPECT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-5f) << name << " " << i;
  }
}

TEST(KvPrefix, PositionsThatRestartAfterAPrefixKeepItsBlocks) {
  // A prefix not counted in positions (P-tuning): the step's tokens at positions 0.. go
  // to the cache slots after the prefix, never over it.
  auto m = load_model(fixture("llama"));
  m->init_kv_cache(16, 4);
  const std::vector<int32_t> prefix = {11, 200, 37, 480, 9, 9, 301, 77};
  m->forward(one_seq(prefix, 0, {4, 5}));
  const Tensor prefix_next = m->forward(one_seq({42}, 8, {4, 5, 7}));

  ForwardBatch tuned = one_seq({5, 6, 7}, 8, {4, 5, 6});
  tuned.positions = {0, 1, 2};
  const Tensor in_one = m->forward(tuned);
  // The prefix's blocks are as they were.
  EXPECT_TRUE(rows_equal(prefix_next, m->forward(one_seq({42}, 8, {4, 5, 7})), 0));
  // The tokens went to slots 8.. of the sequence: computing them in two steps reads
  // the first ones back from there.
  ForwardBatch first = one_seq({5, 6}, 8, {4, 5, 6});
  first.positions = {0, 1};
  m->forward(first);
  ForwardBatch second = one_seq({7}, 10, {4, 5, 6});
  second.positions = {2};
  const Tensor in_two = m->forward(second);
  for (int64_t i = 0; i < in_one.numel(); ++i)
    EXPECT_NEAR(in_two.data<float>()[i], in_one.data<float>()[i], 1e-5f) << i;
}

// Two branches of speculative tokens after a cached prompt, verified in one step with a
// tree mask, beside a plain sequence: each token's logits are its branch's alone.
TEST(TreeMasks, EachBranchAsIfAlone) {
  for (const char* name : {"llama", "qwen2"}) {
    auto m = load_model(fixture(name));
    m->init_kv_cache(16, 4);
    const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77};
    m->forward(one_seq(prompt, 0, {0, 1}));
    // Branch A: 5, 6; branch B: 7, 8 (both after the prompt, positions 8 and 9).
    ForwardBatch tree;
    tree.token_ids = {5, 6, 7, 8, 40, 41, 42};
    tree.positions = {8, 9, 8, 9, 0, 1, 2};
    tree.query_start = {0, 4, 7};
    tree.context_lens = {12, 3};
    tree.block_tables = {0, 1, 2, 5, -1, -1};
    tree.max_blocks_per_seq = 3;
    tree.logits_rows = {0, 1, 2, 3, 4, 5, 6};
    tree.tree_masks = {{1, 0, 0, 0,  //
                        1, 1, 0, 0,  //
                        0, 0, 1, 0,  //
                        0, 0, 1, 1},
                       {}};
    const Tensor got = m->forward(tree);
    const int64_t v = m->vocab_size();

    auto branch = [&](std::vector<int32_t> tokens, int32_t block) {
      ForwardBatch b = one_seq(tokens, 8, {0, 1, block});
      b.logits_rows = {0, 1};
      return m->forward(b);
    };
    const Tensor a = branch({5, 6}, 3), bb = branch({7, 8}, 4);
    ForwardBatch plain = one_seq({40, 41, 42}, 0, {6});
    plain.logits_rows = {0, 1, 2};
    const Tensor c = m->forward(plain);
    auto expect_row = [&](int64_t got_row, const Tensor& want, int64_t want_row) {
      for (int64_t i = 0; i < v; ++i) {
        const float w = want.data<float>()[want_row * v + i];
        ASSERT_NEAR(got.data<float>()[got_row * v + i], w, 1e-4f * (1.f + std::fabs(w)))
            << name << " row " << got_row << " token " << i;
      }
    };
    expect_row(0, a, 0);
    expect_row(1, a, 1);
    expect_row(2, bb, 0);
    expect_row(3, bb, 1);
    for (int r = 0; r < 3; ++r) expect_row(4 + r, c, r);
    // Without the mask b1 and b2 would see branch A: the mask is what made them equal.
    tree.tree_masks.clear();
    const Tensor causal = m->forward(tree);
    EXPECT_FALSE(rows_equal(causal, got, 3));
  }
}

TEST(TreeMasks, BadMasksAndAdaptersAreRefused) {
  auto m = load_model(fixture("llama"));
  m->init_kv_cache(8, 4);
  const ForwardBatch base = one_seq({5, 6, 7}, 0, {0});
  auto refused = [&](const ForwardBatch& b, const char* needle) {
    expect_invalid([&] { m->forward(b); }, needle);
  };
  ForwardBatch b = base;
  b.tree_masks = {{1, 0, 1, 1}};
  refused(b, "tree mask of 4 entries for 3 x 3");
  b.tree_masks = {{1, 0, 0, 1, 0, 0, 0, 1, 1}};
  refused(b, "does not see itself");
  b.tree_masks = {{1, 1, 0, 0, 1, 0, 0, 0, 1}};
  refused(b, "sees the later token");
  b.tree_masks = {{}, {}};
  refused(b, "2 tree masks for 1 sequences");
  b = base;
  b.adapter_ids = {3};
  refused(b, "no adapter 3 loaded");
  b.adapter_ids = {0, 0};
  refused(b, "2 adapter ids for 1 sequences");
  // The base model's id, and a causal mask given explicitly, change nothing.
  const Tensor plain = m->forward(base);
  b.adapter_ids = {0};
  b.tree_masks = {{1, 0, 0, 1, 1, 0, 1, 1, 1}};
  const Tensor explicit_causal = m->forward(b);
  for (int64_t i = 0; i < plain.numel(); ++i)
    EXPECT_NEAR(explicit_causal.data<float>()[i], plain.data<float>()[i],
                1e-4f * (1.f + std::fabs(plain.data<float>()[i])));
}

}  // namespace
}  // namespace tachyon
