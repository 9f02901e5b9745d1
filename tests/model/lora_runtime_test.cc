// Multi-LoRA in the model runner on the CPU, with adapters drawn at random for the
// bundled trained model (models/tiny-kjv-chat): unmerged adapters give the logits of the
// weights they are merged into, sequences of several adapters and the base model share
// one step, adapters are swapped through fewer device slots than there are adapters, and
// bad steps are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/loader.h"
#include "model/lora_adapter.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

constexpr int32_t kBlock = 16;
const std::string kModel = std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat";

std::unique_ptr<Model> load(int32_t max_loras, int32_t max_rank) {
  LoadOptions opts;
  opts.device = Device{};
  opts.dtype = DType::kF32;
  opts.lora.max_loras = max_loras;
  opts.lora.max_rank = max_rank;
  auto model = load_model(kModel, opts);
  model->init_kv_cache(64, kBlock);
  return model;
}

Tensor random_matrix(int64_t rows, int64_t cols, float scale, std::mt19937& rng) {
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  std::normal_distribution<float> d(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// An adapter of rank r on `slots` of every layer, drawn from `seed`.
LoraAdapter random_adapter(const ModelConfig& cfg, int32_t r, std::vector<Slot> slots,
                           uint32_t seed) {
  std::mt19937 rng(seed);
  LoraAdapter a;
  a.max_rank = r;
  for (int32_t l = 0; l < cfg.layer_num; ++l)
    for (Slot s : slots) {
      const Shape shape = slot_shape(cfg, s, l);
      LoraModule m;
      m.layer = l;
      m.slot = s;
      m.name = std::string(slot_name(s)) + "." + std::to_string(l);
      m.a = random_matrix(r, shape[1], 0.08f, rng);
      m.b = random_matrix(shape[0], r, 0.08f, rng);
      a.modules.push_back(std::move(m));
    }
  return a;
}

const std::vector<Slot> kAll = {Slot::kQ,    Slot::kK,  Slot::kV,   Slot::kO,
                                Slot::kGate, Slot::kUp, Slot::kDown};

// The logits of every position of `tokens` run as one sequence of `adapter`.
std::vector<float> prompt_logits(Model& m, const std::vector<int32_t>& tokens, int32_t adapter) {
  ForwardBatch b = testing_util::one_seq(tokens, 0, {0, 1});
  b.logits_rows.clear();
  for (int32_t i = 0; i < b.num_tokens(); ++i) b.logits_rows.push_back(i);
  if (adapter != 0) b.adapter_ids = {adapter};
  Tensor t = m.forward(b);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

const std::vector<int32_t> kPrompt = {1, 512, 3681, 278, 6763, 4423, 2825, 278, 18356, 322, 278};

TEST(LoraRuntime, UnmergedEqualsMergedAndChangesTheLogits) {
  auto model = load(2, 8);
  const LoraAdapter a = random_adapter(model->config(), 8, kAll, 7);
  model->add_adapter(1, model->prepare_adapter(a));
  const std::vector<float> base = prompt_logits(*model, kPrompt, 0);
  const std::vector<float> lora = prompt_logits(*model, kPrompt, 1);
  EXPECT_GT(max_diff(base, lora), 0.5f) << "the adapter changes nothing";

  // The reference: the same adapter folded into the checkpoint's weights.
  const ModelConfig& cfg = model->config();
  ModelWeights weights = load_weights(*Checkpoint::open(kModel), cfg, model->weights().map);
  // In f32, so that the merged sums are not rounded to the checkpoint's bf16.
  for (LayerWeights& L : weights.layers)
    for (LinearWeights* p : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
      if (p->w) p->w = p->w.to(DType::kF32);
  merge_lora(weights, a);
  ModelRunner ref(cfg, std::move(weights), make_cpu_backend());
  ref.init_kv_cache(64, kBlock);
  EXPECT_LT(max_diff(lora, prompt_logits(ref, kPrompt, 0)), 2e-4f);
}

TEST(LoraRuntime, OneStepMixesAdaptersAndTheBase) {
  auto model = load(3, 8);
  model->add_adapter(4, model->prepare_adapter(random_adapter(model->config(), 8, kAll, 1)));
  model->add_adapter(
      9, model->prepare_adapter(random_adapter(model->config(), 4, {Slot::kQ, Slot::kV}, 2)));
  const std::vector<int32_t> ids = {4, 0, 9};
  std::vector<std::vector<float>> alone;
  for (int32_t id : ids) alone.push_back(prompt_logits(*model, kPrompt, id));
  // The three as one step, each in its own blocks, every position's logits.
  ForwardBatch b;
  const int32_t n = static_cast<int32_t>(kPrompt.size());
  b.query_start = {0};
  for (int32_t s = 0; s < 3; ++s) {
    for (int32_t i = 0; i < n; ++i) {
      b.token_ids.push_back(kPrompt[static_cast<size_t>(i)]);
      b.positions.push_back(i);
      b.logits_rows.push_back(s * n + i);
    }
    b.query_start.push_back((s + 1) * n);
    b.context_lens.push_back(n);
    b.block_tables.push_back(2 * s + 2);
    b.block_tables.push_back(2 * s + 3);
  }
  b.max_blocks_per_seq = 2;
  b.adapter_ids = ids;
  Tensor t = model->forward(b);
  const int64_t per = static_cast<int64_t>(alone[0].size());
  for (int32_t s = 0; s < 3; ++s) {
    const float* p = t.data<float>() + s * per;
    EXPECT_LT(max_diff(alone[static_cast<size_t>(s)], std::vector<float>(p, p + per)), 1e-4f)
        << "sequence " << s << " (adapter " << ids[static_cast<size_t>(s)] << ")";
  }
}

TEST(LoraRuntime, AdaptersSwapThroughFewerSlots) {
  auto model = load(2, 8);
  auto* runner = dynamic_cast<ModelRunner*>(model.get());
  ASSERT_NE(runner, nullptr);
  for (int32_t id = 1; id <= 3; ++id)
    model->add_adapter(id, model->prepare_adapter(random_adapter(model->config(), 8, kAll,
                                                                 static_cast<uint32_t>(10 + id))));
  std::vector<std::vector<float>> first;
  for (int32_t id = 1; id <= 3; ++id) first.push_back(prompt_logits(*model, kPrompt, id));
  const int64_t swaps = runner->lora_swaps();
  EXPECT_EQ(swaps, 3);
  // 3 is resident with 2; 1 was evicted by 3 and comes back in 2's place... each
  // result is its own adapter's.
  for (int32_t id : {3, 1, 2, 1, 3})
    EXPECT_EQ(max_diff(first[static_cast<size_t>(id - 1)], prompt_logits(*model, kPrompt, id)), 0.f)
        << "adapter " << id;
  EXPECT_GT(runner->lora_swaps(), swaps);
  // Removed: refused from then on.
  model->remove_adapter(2);
  testing_util::expect_invalid([&] { prompt_logits(*model, kPrompt, 2); }, "no adapter 2");
}

TEST(LoraRuntime, BadStepsAndAdaptersAreRefused) {
  auto model = load(1, 4);
  model->add_adapter(1, model->prepare_adapter(random_adapter(model->config(), 4, kAll, 3)));
  model->add_adapter(2, model->prepare_adapter(random_adapter(model->config(), 4, kAll, 4)));
  // Rank past the model's room.
  testing_util::expect_invalid(
      [&] { model->prepare_adapter(random_adapter(model->config(), 8, kAll, 5)); }, "rank 8");
  // An id twice.
  testing_util::expect_invalid(
      [&] {
        model->add_adapter(1, model->prepare_adapter(random_adapter(model->config(), 4, kAll, 6)));
      },
      "not new");
  // Two adapters in one step with one slot.
  ForwardBatch b = testing_util::one_seq({1, 2}, 0, {0});
  b.query_start = {0, 1, 2};
  b.positions = {0, 0};
  b.context_lens = {1, 1};
  b.block_tables = {0, 1};
  b.max_blocks_per_seq = 1;
  b.logits_rows = {0, 1};
  b.adapter_ids = {1, 2};
  testing_util::expect_invalid([&] { model->forward(b); }, "slots");
  b.adapter_ids = {1};
  testing_util::expect_invalid([&] { model->forward(b); }, "adapter ids");
  // Without room: refused.
  auto plain = load(0, 16);
  testing_util::expect_invalid(
      [&] { plain->prepare_adapter(random_adapter(plain->config(), 4, kAll, 3)); }, "without room");
}

}  // namespace
}  // namespace tachyon
