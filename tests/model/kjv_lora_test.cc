// The bundled trained adapter (models/lora-shout, a PEFT LoRA for models/tiny-kjv-chat that
// answers in capitals) against transformers' greedy generations of base + adapter in
// tests/engine/data/kjv_reference.json, on the CPU: served unmerged (registered in the
// model, each step naming it; the base's generations on the same model with no adapter),
// and merged into the weights at load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "conformance/lora_cases.h"
#include "core/json.h"
#include "model/loader.h"
#include "model/lora_adapter.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;
const std::string kBase = kRoot + "/models/tiny-kjv-chat";
const std::string kAdapter = kRoot + "/models/lora-shout";

// Greedy generation of every reference prompt of `entry`, prefill then one token per
// step until EOS, served by adapter `id` (0: none), in a cache of 64 blocks of 16.
void expect_reference(Model& model, const std::string& entry, int32_t id) {
  const ModelConfig& cfg = model.config();
  ASSERT_FALSE(cfg.eos_token_ids.empty());
  const int32_t eos = static_cast<int32_t>(cfg.eos_token_ids[0]);
  Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  const int32_t block = 16;
  const int64_t vocab = model.vocab_size();
  ASSERT_FALSE(ref["models"][entry].empty());
  for (const Json& c : ref["models"][entry]) {
    std::vector<int32_t> tokens = c["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> want = c["greedy"][0].get<std::vector<int32_t>>();
    std::vector<int32_t> got;
    int32_t computed = 0;
    while (got.size() < want.size()) {
      ForwardBatch b = testing_util::next_step(tokens, computed, block, 64);
      if (id != 0) b.adapter_ids = {id};
      const int32_t n = b.num_tokens();
      Tensor logits = model.forward(b);
      computed += n;
      const float* p = logits.data<float>();
      const int32_t next = static_cast<int32_t>(std::max_element(p, p + vocab) - p);
      got.push_back(next);
      if (next == eos) break;
      tokens.push_back(next);
    }
    EXPECT_EQ(got, want) << entry << ", prompt: " << c["prompt"].get<std::string>();
  }
}

TEST(KjvLora, UnmergedMatchesTransformers) {
  LoadOptions opts;
  opts.device = Device{};  // the CPU
  opts.lora.max_loras = 1;
  opts.lora.max_rank = 16;
  auto model = load_model(kBase, opts);
  LoraAdapter a = load_lora_adapter(kAdapter, model->config(), model->weights().map, {16});
  model->add_adapter(1, model->prepare_adapter(a));
  model->init_kv_cache(64, 16);
  expect_reference(*model, "tiny-kjv-chat+lora-shout", 1);
  expect_reference(*model, "tiny-kjv-chat", 0);
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The logits of every step along the reference's tokens (the prompt, then each greedy
// token fed back), served by adapter `id` (0: none): one vector per step.
std::vector<std::vector<float>> teacher_forced(Model& model, const Json& c, int32_t id) {
  std::vector<int32_t> tokens = c["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = c["greedy"][0].get<std::vector<int32_t>>();
  const int64_t vocab = model.vocab_size();
  std::vector<std::vector<float>> out;
  int32_t computed = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    ForwardBatch b = testing_util::next_step(tokens, computed, 16, 64);
    if (id != 0) b.adapter_ids = {id};
    computed += b.num_tokens();
    Tensor logits = model.forward(b);
    out.emplace_back(logits.data<float>(), logits.data<float>() + vocab);
    tokens.push_back(want[k]);
  }
  return out;
}

// Merged into the checkpoint's bf16 weights, the adapted matrices are rounded to bf16,
// which moves the logits by up to about 0.16 here: merged logits are held within
// kMergedTolerance of the unmerged model's (which reproduces transformers' tokens), and
// the merged model's greedy token equals the reference wherever the reference's top-1
// minus top-2 margin exceeds twice that.
constexpr double kMergedTolerance = 0.25;

TEST(KjvLora, MergedMatchesTransformers) {
  auto merged = testing_util::load_merged_model(kBase, kAdapter);
  merged->init_kv_cache(64, 16);
  LoadOptions opts;
  opts.device = Device{};  // the CPU
  opts.lora.max_loras = 1;
  auto unmerged = load_model(kBase, opts);
  unmerged->add_adapter(1, unmerged->prepare_adapter(load_lora_adapter(
                               kAdapter, unmerged->config(), unmerged->weights().map, {16})));
  unmerged->init_kv_cache(64, 16);
  Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  size_t steps = 0, checked = 0;
  for (const Json& c : ref["models"]["tiny-kjv-chat+lora-shout"]) {
    const std::string prompt = c["prompt"].get<std::string>();
    const std::vector<int32_t> want = c["greedy"][0].get<std::vector<int32_t>>();
    const auto m = teacher_forced(*merged, c, 0);
    const auto u = teacher_forced(*unmerged, c, 1);
    for (size_t k = 0; k < want.size(); ++k) {
      double diff = 0;
      for (size_t v = 0; v < u[k].size(); ++v)
        diff = std::max(diff, double{std::abs(m[k][v] - u[k][v])});
      EXPECT_LE(diff, kMergedTolerance) << prompt << ", step " << k;
      std::vector<float> top = u[k];
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      EXPECT_EQ(argmax(u[k]), want[k]) << prompt << ", unmerged, step " << k;
      ++steps;
      if (top[0] - top[1] > 2 * kMergedTolerance) {
        ++checked;
        EXPECT_EQ(argmax(m[k]), want[k]) << prompt << ", merged, step " << k;
      }
    }
  }
  EXPECT_GT(checked, steps / 2);  // most steps' margins are far above the rounding
}

// On a base quantized to int8 at load (QLoRA-style serving), the adapter still applies:
// along transformers' base + adapter tokens, the greedy token is the reference's at
// nearly every step (the int8 weights move the logits a little), and not the base's.
TEST(KjvLora, AdapterOnAQuantizedBase) {
  LoadOptions opts;
  opts.device = Device{};  // the CPU
  opts.quantization = LoadQuantization::kInt8;
  opts.lora.max_loras = 1;
  auto model = load_model(kBase, opts);
  model->add_adapter(1, model->prepare_adapter(load_lora_adapter(kAdapter, model->config(),
                                                                 model->weights().map, {16})));
  model->init_kv_cache(64, 16);
  Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  size_t steps = 0, agree = 0, agree_base = 0;
  for (const Json& c : ref["models"]["tiny-kjv-chat+lora-shout"]) {
    const std::vector<int32_t> want = c["greedy"][0].get<std::vector<int32_t>>();
    const auto with = teacher_forced(*model, c, 1);
    const auto without = teacher_forced(*model, c, 0);
    for (size_t k = 0; k < want.size(); ++k) {
      ++steps;
      agree += argmax(with[k]) == want[k];
      agree_base += argmax(without[k]) == want[k];
    }
  }
  EXPECT_GE(agree * 100, steps * 95) << agree << " of " << steps;
  EXPECT_LE(agree_base * 100, steps * 50) << agree_base << " of " << steps;
}

}  // namespace
}  // namespace tachyon
