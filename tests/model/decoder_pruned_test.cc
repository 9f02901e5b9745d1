// Layers of their own shapes (a pruned model: ModelConfig's per-layer heads, KV heads
// and intermediate sizes, a layer's attention or MLP absent). A pruned model must give
// the logits of the full model with the pruned parts' outputs zeroed: the o columns of
// the removed heads, the down columns of the removed neurons, the whole o or down of an
// absent block. Its KV cache holds only its layers' KV heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "model/model_test_util.h"
#include "model/registry.h"
#include "model/weights.h"

namespace tachyon {
namespace {

using testing_util::fixture;
using testing_util::one_seq;

// Rows (or columns) `keep` of a matrix, in f32.
Tensor take(const Tensor& t, const std::vector<int64_t>& keep, bool columns) {
  const Tensor m = t.to(DType::kF32);
  const int64_t rows = m.dim(0), cols = m.dim(1), n = static_cast<int64_t>(keep.size());
  Tensor out = Tensor::empty(columns ? Shape{rows, n} : Shape{n, cols}, DType::kF32);
  for (int64_t r = 0; r < (columns ? rows : n); ++r)
    for (int64_t c = 0; c < (columns ? n : cols); ++c)
      out.data<float>()[r * out.dim(1) + c] =
          columns ? m.data<float>()[r * cols + keep[c]] : m.data<float>()[keep[r] * cols + c];
  return out;
}

// The matrix with every column outside `keep` zeroed, in f32.
Tensor zero_other_columns(const Tensor& t, const std::vector<int64_t>& keep) {
  Tensor m = t.to(DType::kF32).clone();
  const int64_t rows = m.dim(0), cols = m.dim(1);
  std::vector<bool> kept(static_cast<size_t>(cols), false);
  for (int64_t c : keep) kept[static_cast<size_t>(c)] = true;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (!kept[static_cast<size_t>(c)]) m.data<float>()[r * cols + c] = 0.f;
  return m;
}

// Indices [first, first + n) of units of `width`, for each unit in `units`.
std::vector<int64_t> spans(const std::vector<int32_t>& units, int64_t width) {
  std::vector<int64_t> out;
  for (int32_t u : units)
    for (int64_t i = 0; i < width; ++i) out.push_back(u * width + i);
  return out;
}

// What one layer keeps: its KV heads (with the query heads of their groups) and its
// intermediate neurons; an empty list drops the block.
struct LayerCut {
  std::vector<int32_t> kv_heads;
  std::vector<int64_t> neurons;
};

struct Models {
  std::unique_ptr<ModelRunner> pruned, masked;
};

// The llama fixture cut per `cuts`, and the full model with the cut parts' outputs zeroed.
Models build(const std::vector<LayerCut>& cuts, std::unique_ptr<Checkpoint>& ckpt) {
  const std::string dir = fixture("llama");
  HfConfig hf = HfConfig::load(dir + "/config.json");
  const ArchSpec& spec = find_arch(hf, "");
  ModelConfig mc = map_model_config(hf, "", dir + "/generation_config.json");
  ckpt = Checkpoint::open(dir);
  const ModelWeights full = load_weights(*ckpt, mc, spec.map_weights(mc));
  EXPECT_EQ(static_cast<int32_t>(cuts.size()), mc.layer_num);
  const int32_t group = mc.head_num / mc.head_num_kv, hd = mc.size_per_head;
  ModelConfig pc = mc;
  ModelWeights pw = full, mw = full;
  for (int l = 0; l < mc.layer_num; ++l) {
    const LayerCut& cut = cuts[static_cast<size_t>(l)];
    std::vector<int32_t> q_heads;
    for (int32_t kv : cut.kv_heads)
      for (int32_t g = 0; g < group; ++g) q_heads.push_back(kv * group + g);
    pc.layer_head_num.push_back(static_cast<int32_t>(q_heads.size()));
    pc.layer_head_num_kv.push_back(static_cast<int32_t>(cut.kv_heads.size()));
    pc.layer_inter_size.push_back(static_cast<int64_t>(cut.neurons.size()));
    const LayerWeights& F = full.layers[static_cast<size_t>(l)];
    LayerWeights& P = pw.layers[static_cast<size_t>(l)];
    LayerWeights& M = mw.layers[static_cast<size_t>(l)];
    const std::vector<int64_t> q_cols = spans(q_heads, hd), kv_rows = spans(cut.kv_heads, hd);
    if (q_heads.empty()) {
      P.attn_norm = {};
      P.q = P.k = P.v = P.o = {};
    } else {
      P.q.w = take(F.q.w, q_cols, false);
      P.k.w = take(F.k.w, kv_rows, false);
      P.v.w = take(F.v.w, kv_rows, false);
      P.o.w = take(F.o.w, q_cols, true);
    }
    M.o.w = zero_other_columns(F.o.w, q_cols);
    if (cut.neurons.empty()) {
      P.mlp_norm = {};
      P.gate = P.up = P.down = {};
    } else {
      P.gate.w = take(F.gate.w, cut.neurons, false);
      P.up.w = take(F.up.w, cut.neurons, false);
      P.down.w = take(F.down.w, cut.neurons, true);
    }
    M.down.w = zero_other_columns(F.down.w, cut.neurons);
  }
  Models m;
  m.pruned = std::make_unique<ModelRunner>(pc, std::move(pw), make_cpu_backend());
  m.masked = std::make_unique<ModelRunner>(mc, std::move(mw), make_cpu_backend());
  return m;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i)
    scale = std::max(scale, double{std::abs(b.data<float>()[i])});
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, double{std::abs(a.data<float>()[i] - b.data<float>()[i])});
  return worst / scale;
}

// A prompt of 12 tokens and three decode steps on both models.
void expect_same_logits(Models& m) {
  const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77, 5, 64, 3, 150};
  const std::vector<int32_t> next = {42, 7, 311};
  const std::vector<int32_t> blocks = {2, 0, 3, 1};
  m.pruned->init_kv_cache(4, 4);
  m.masked->init_kv_cache(4, 4);
  for (size_t s = 0; s <= next.size(); ++s) {
    const ForwardBatch b =
        s == 0 ? one_seq(prompt, 0, blocks)
               : one_seq({next[s - 1]}, static_cast<int32_t>(prompt.size() + s - 1), blocks);
    const Tensor got = m.pruned->forward(b), want = m.masked->forward(b);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_LE(max_rel_diff(got, want), 1e-5) << "step " << s;
  }
}

std::vector<int64_t> first(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Layer 0 keeps one of its two KV heads (and its two query heads) and 100 of its 176
// neurons (every third dropped first); layer 1 has no attention.
TEST(DecoderPruned, FewerHeadsFewerNeuronsAndAnAbsentAttention) {
  std::vector<int64_t> neurons;
  for (int64_t i = 0; i < 176 && neurons.size() < 100; ++i)
    if (i % 3 != 1) neurons.push_back(i);
  std::unique_ptr<Checkpoint> ckpt;
  Models m = build({LayerCut{{1}, neurons}, LayerCut{{}, first(176)}}, ckpt);
  // The cache holds layer 0's one KV head only: 1 head x 16 dims x K and V x 4 tokens.
  EXPECT_EQ(m.pruned->kv_bytes_per_block(4), size_t{1 * 16 * 2 * 4 * 4});
  EXPECT_EQ(m.masked->kv_bytes_per_block(4), size_t{2 * 2 * 16 * 2 * 4 * 4});
  expect_same_logits(m);
}

// Layer 0 has no MLP; layer 1 keeps both KV heads and 8 neurons.
TEST(DecoderPruned, AnAbsentMlp) {
  std::unique_ptr<Checkpoint> ckpt;
  Models m =
      build({LayerCut{{0, 1}, {}}, LayerCut{{0, 1}, {3, 17, 40, 41, 99, 100, 150, 175}}}, ckpt);
  expect_same_logits(m);
}

// Shapes the config refuses: lists of the wrong length, KV heads that do not divide the
// heads, a KV head without heads, no attention anywhere, and a missing block where the
// residual form needs it.
TEST(DecoderPruned, ConfigRefusesInconsistentShapes) {
  const std::string dir = fixture("llama");
  HfConfig hf = HfConfig::load(dir + "/config.json");
  const ModelConfig mc = map_model_config(hf, "", dir + "/generation_config.json");
  auto refused = [&](auto&& change) {
    ModelConfig c = mc;
    change(c);
    EXPECT_THROW(c.validate(), InvalidArgument);
  };
  refused([](ModelConfig& c) { c.layer_head_num = {4}; });
  refused([](ModelConfig& c) {
    c.layer_head_num = {3, 4};
    c.layer_head_num_kv = {2, 2};
  });
  refused([](ModelConfig& c) {
    c.layer_head_num = {0, 4};
    c.layer_head_num_kv = {1, 2};
  });
  refused([](ModelConfig& c) { c.layer_head_num = {0, 0}; });
  refused([](ModelConfig& c) { c.layer_inter_size = {-1, 176}; });
  refused([](ModelConfig& c) {
    c.layer_inter_size = {0, 176};
    c.post_norm = true;
  });
  ModelConfig ok = mc;
  ok.layer_head_num = {0, 2};
  ok.layer_head_num_kv = {0, 1};
  ok.layer_inter_size = {0, 50};
  EXPECT_NO_THROW(ok.validate());
}

}  // namespace
}  // namespace tachyon
