// Decode and verify steps replayed as CUDA graphs against the same steps run eagerly: two copies
// of the bundled model (models/tiny-kjv-chat) on the GPU, one with step graphs off,
// fed the same batches. Batches are padded to buckets (3 sequences -> 4, 2 -> 2), the
// context crosses a bucket boundary (512), sequences leave and join, and a long
// prefill in the middle regrows the decoder's buffers (the graphs must be recorded
// again, not replayed on freed memory). The logits of every decode step must agree
// within the precision's error (only the padding changes GEMM shapes, so the summation
// order may differ) and the graphs must actually have been replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/step_batch.h"
#include "model/loader.h"
#include "model/model_runner.h"

namespace tachyon::cuda_test {
namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kBlocksEach = 48;  // up to 768 tokens per sequence

std::unique_ptr<Model> load(DType dtype, bool graphs) {
  LoadOptions o;
  o.device = Device{DeviceType::kCUDA, 0};
  o.dtype = dtype;
  auto m = load_model(std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat", o);
  m->init_kv_cache(4 * kBlocksEach, kBlock);
  auto* d = dynamic_cast<ModelRunner*>(m.get());
  EXPECT_NE(d, nullptr);
  if (d != nullptr) d->set_step_graphs(graphs);
  return m;
}

using Seq = StepSeq;

// Each sequence's blocks in reverse order.
ForwardBatch make_batch(const std::vector<Seq*>& seqs) {
  return step_batch(seqs, kBlocksEach,
                    [](int32_t slot, int32_t i) { return (slot + 1) * kBlocksEach - 1 - i; });
}

class CudaGraphTest : public ::testing::TestWithParam<DType> {};

TEST_P(CudaGraphTest, DecodeGraphsMatchEager) {
  TACHYON_REQUIRE_GPU();
  const DType dt = GetParam();
  auto eager = load(dt, false);
  auto graph = load(dt, true);
  const int64_t vocab = eager->vocab_size();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(vocab) - 1);
  auto random_seq = [&](int32_t slot, int32_t len) {
    Seq s;
    s.slot = slot;
    for (int32_t i = 0; i < len; ++i) s.tokens.push_back(tok(rng));
    return s;
  };
  std::vector<Seq> all = {random_seq(0, 5), random_seq(1, 37), random_seq(2, 495)};
  all.reserve(4);
  std::vector<Seq*> live = {&all[0], &all[1], &all[2]};
  const double tol = dt == DType::kF32 ? 1e-4 : 3e-2;
  // Prefills (eager in both).
  for (Seq* s : live) {
    const ForwardBatch b = make_batch({s});
    eager->forward(b);
    graph->forward(b);
    s->computed = static_cast<int32_t>(s->tokens.size());
    s->tokens.push_back(tok(rng));  // the first token to decode
  }
  int decode_steps = 0;
  for (int step = 0; step < 40; ++step) {
    if (step == 10) live.erase(live.begin() + 1);  // 2 sequences left
    if (step == 18) {                              // a long prefill regrows every activation buffer
      all.push_back(random_seq(3, 700));
      Seq* s = &all.back();
      const ForwardBatch b = make_batch({s});
      eager->forward(b);
      graph->forward(b);
      s->computed = static_cast<int32_t>(s->tokens.size());
      s->tokens.push_back(tok(rng));
      live.push_back(s);
    }
    // Next tokens: the eager model's argmax (the same for both).
    const ForwardBatch b = make_batch(live);
    const Tensor want = eager->forward(b);
    const Tensor got = graph->forward(b);
    ++decode_steps;
    const ErrorReport e = measure(host_values(got), host_values(want));
    ASSERT_FALSE(e.nan) << "step " << step;
    ASSERT_LE(e.normalised, tol) << "step " << step << " with " << live.size() << " sequences";
    for (size_t r = 0; r < live.size(); ++r) {
      const float* p = want.data<float>() + r * vocab;
      live[r]->computed = static_cast<int32_t>(live[r]->tokens.size());
      live[r]->tokens.push_back(static_cast<int32_t>(std::max_element(p, p + vocab) - p));
    }
  }
  const auto* d = dynamic_cast<const ModelRunner*>(graph.get());
  ASSERT_NE(d, nullptr);
  std::printf("  %s: %d decode steps, %lld graph replays, %lld recordings\n",
              dtype_label(dt).c_str(), decode_steps, static_cast<long long>(d->graph_replays()),
              static_cast<long long>(d->graph_records()));
  // Buckets (4, 512), (4, 1024), (2, 1024), then (4, 1024) again after the regrowth.
  EXPECT_GE(d->graph_records(), 3);
  EXPECT_GE(d->graph_replays(), decode_steps - 8);
  const auto* e = dynamic_cast<const ModelRunner*>(eager.get());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->graph_replays(), 0);
}

// Verify steps (speculative decoding) as graphs: each sequence computes its last token
// and Q - 1 draft tokens with every row's logits, chained (causal) or in a tree mask,
// at the same positions over and over (the drafts rejected, then others), 3 sequences
// padded to 4; graph and eager logits agree and the graphs are replayed.
TEST_P(CudaGraphTest, VerifyGraphsMatchEager) {
  TACHYON_REQUIRE_GPU();
  const DType dt = GetParam();
  auto eager = load(dt, false);
  auto graph = load(dt, true);
  const int64_t vocab = eager->vocab_size();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(vocab) - 1);
  std::vector<Seq> all(3);
  std::vector<Seq*> live;
  for (int32_t i = 0; i < 3; ++i) {
    all[i].slot = i;
    for (int32_t n = 0; n < 40 + 200 * i; ++n) all[i].tokens.push_back(tok(rng));
    live.push_back(&all[i]);
    const ForwardBatch b = make_batch({&all[i]});
    eager->forward(b);
    graph->forward(b);
    all[i].computed = static_cast<int32_t>(all[i].tokens.size());
  }
  const double tol = dt == DType::kF32 ? 1e-4 : 3e-2;
  int steps = 0;
  for (const int32_t Q : {5, 4}) {
    const bool tree = Q == 4;
    for (int round = 0; round < 6; ++round) {
      ForwardBatch b;
      b.query_start = {0};
      b.max_blocks_per_seq = kBlocksEach;
      for (Seq* s : live) {
        for (int32_t i = 0; i < Q; ++i) {
          b.token_ids.push_back(tok(rng));
          // A tree: the root, two children, a grandchild of the first (depths 0 1 1 2).
          const int32_t depth = tree ? (i == 0 ? 0 : i == 3 ? 2 : 1) : i;
          b.positions.push_back(s->computed + depth);
        }
        b.query_start.push_back(b.query_start.back() + Q);
        b.context_lens.push_back(s->computed + Q);
        for (int32_t i = 0; i < kBlocksEach; ++i)
          b.block_tables.push_back((s->slot + 1) * kBlocksEach - 1 - i);
        if (tree)
          b.tree_masks.push_back({1, 0, 0, 0,  //
                                  1, 1, 0, 0,  //
                                  1, 0, 1, 0,  //
                                  1, 1, 0, 1});
      }
      for (int32_t r = 0; r < b.num_tokens(); ++r) b.logits_rows.push_back(r);
      const Tensor want = eager->forward(b);
      const Tensor got = graph->forward(b);
      ++steps;
      const ErrorReport e = measure(host_values(got), host_values(want));
      ASSERT_FALSE(e.nan) << "Q " << Q << " round " << round;
      ASSERT_LE(e.normalised, tol) << "Q " << Q << " round " << round;
    }
  }
  const auto* d = dynamic_cast<const ModelRunner*>(graph.get());
  ASSERT_NE(d, nullptr);
  // One recording per (Q, tree) bucket, the other steps replayed.
  EXPECT_GE(d->graph_replays(), steps - 4);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGraphTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
