// DeciLM / Nemotron-NAS: block_configs mapped to per-layer heads, KV heads and FFN
// widths, blocks replaced by a linear map, the refusals naming the field, and a linear
// block computing W n(x) added to the residual. Logits are checked against the reference
// of the conformance fixture tests/conformance/fixtures/decilm.
#include <gtest/gtest.h>

#include <vector>

#include "core/json.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/load_quantization.h"
#include "model/model_test_util.h"
#include "model/weights.h"

namespace tachyon {
namespace {

using testing_util::expect_invalid;
using testing_util::map;

Json block(Json attn, Json ffn) {
  Json a = {{"n_heads_in_group", nullptr}, {"no_op", false}, {"replace_with_linear", false}};
  Json f = {{"ffn_mult", nullptr}, {"no_op", false}, {"replace_with_linear", false}};
  for (auto& [k, v] : attn.items()) a[k] = v;
  for (auto& [k, v] : ffn.items()) f[k] = v;
  return {{"attention", a}, {"ffn", f}};
}

Json decilm(Json blocks) {
  return {{"architectures", {"DeciLMForCausalLM"}},
          {"model_type", "nemotron-nas"},
          {"hidden_size", 96},
          {"num_attention_heads", 6},
          {"num_hidden_layers", blocks.size()},
          {"num_key_value_heads", nullptr},
          {"intermediate_size", nullptr},
          {"vocab_size", 512},
          {"rms_norm_eps", 1e-5},
          {"block_configs", blocks}};
}

TEST(DeciLM, BlockConfigsGivePerLayerShapes) {
  const Json j = decilm({block({{"n_heads_in_group", 3}}, {{"ffn_mult", 2.625}}),
                         block({{"replace_with_linear", true}}, {{"ffn_mult", 1.0}}),
                         block({{"n_heads_in_group", 6}}, {{"replace_with_linear", true}}),
                         block({{"no_op", true}}, {{"no_op", true}})});
  const ModelConfig mc = map(j);
  EXPECT_EQ(mc.family, "decilm");
  EXPECT_EQ(mc.layer_head_num, (std::vector<int32_t>{6, 0, 6, 0}));
  EXPECT_EQ(mc.layer_head_num_kv, (std::vector<int32_t>{2, 0, 1, 0}));
  // int(2 * 2.625 * 96 / 3) = 168 -> 256; int(2 * 1 * 96 / 3) = 64 -> 256.
  EXPECT_EQ(mc.layer_inter_size, (std::vector<int64_t>{256, 256, 0, 0}));
  EXPECT_EQ(mc.layer_linear_attn, (std::vector<uint8_t>{0, 1, 0, 0}));
  EXPECT_EQ(mc.layer_linear_mlp, (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_FALSE(mc.has_attention(1));
  EXPECT_TRUE(mc.linear_attention(1));
  // The linear blocks' maps and their norms are read; a no-op block has no tensors.
  const WeightMap m = testing_util::weights_of(j);
  EXPECT_EQ(m.at(Slot::kLinearAttn).name, "model.layers.{L}.self_attn.linear_attn.weight");
  EXPECT_EQ(m.at(Slot::kLinearMlp).name, "model.layers.{L}.mlp.linear_mlp.weight");
  EXPECT_TRUE(slot_present(mc, Slot::kAttnNorm, 1));
  EXPECT_TRUE(slot_present(mc, Slot::kLinearAttn, 1));
  EXPECT_FALSE(slot_present(mc, Slot::kQ, 1));
  EXPECT_TRUE(slot_present(mc, Slot::kMlpNorm, 2));
  EXPECT_FALSE(slot_present(mc, Slot::kDown, 2));
  EXPECT_FALSE(slot_present(mc, Slot::kAttnNorm, 3));
  EXPECT_FALSE(slot_present(mc, Slot::kMlpNorm, 3));
  EXPECT_EQ(slot_shape(mc, Slot::kLinearMlp, 2), (Shape{96, 96}));
}

// The fixture's linear blocks load at [hidden, hidden] and are quantized at load with
// the other decoder matrices.
TEST(DeciLM, LinearBlocksLoadAndQuantize) {
  const std::string dir = testing_util::fixture("decilm");
  const HfConfig hf = HfConfig::load(dir + "/config.json");
  const ModelConfig mc = map_model_config(hf, "");
  auto ckpt = Checkpoint::open(dir);
  ModelWeights w = load_weights(*ckpt, mc, find_arch(hf, "").map_weights(mc));
  ASSERT_TRUE(w.layers[1].linear_attn.w);
  EXPECT_EQ(w.layers[1].linear_attn.w.shape(), (Shape{64, 64}));
  EXPECT_TRUE(w.layers[1].attn_norm.weight);
  EXPECT_FALSE(w.layers[1].q.w);
  ASSERT_TRUE(w.layers[2].linear_mlp.w);
  EXPECT_FALSE(w.layers[2].gate.w);
  EXPECT_FALSE(w.layers[3].attn_norm.weight);
  EXPECT_FALSE(w.layers[4].mlp_norm.weight);
  quantize_at_load(w, LoadQuantization::kInt8, ThreadPool::global());
  EXPECT_NE(quantized(w.layers[1].linear_attn.w), nullptr);
  EXPECT_NE(quantized(w.layers[2].linear_mlp.w), nullptr);
}

TEST(DeciLM, RefusalsNameTheField) {
  const Json ok = block({{"n_heads_in_group", 3}}, {{"ffn_mult", 1.0}});
  expect_invalid(
      [&] {
        map(decilm({block({{"n_heads_in_group", 4}}, {{"ffn_mult", 1.0}})}));
      },
      {"block_configs[0]", "n_heads_in_group 4"});
  expect_invalid(
      [&] {
        map(decilm({block({}, {{"ffn_mult", 1.0}})}));
      },
      {"block_configs[0]", "n_heads_in_group"});
  expect_invalid(
      [&] {
        map(decilm({ok, block({{"n_heads_in_group", 3}}, {})}));
      },
      {"block_configs[1]", "ffn_mult"});
  expect_invalid(
      [&] {
        map(decilm({block({{"window_length", 64}, {"n_heads_in_group", 3}}, {{"ffn_mult", 1.0}})}));
      },
      {"block_configs[0]", "window_length"});
  Json j = decilm({ok, ok});
  j["num_hidden_layers"] = 3;
  expect_invalid([&] { map(j); }, {"block_configs", "2 entries"});
  j = decilm({ok});
  j.erase("block_configs");
  expect_invalid([&] { map(j); }, "block_configs");
  // A linear block needs the pre-norm form.
  ModelConfig mc = map(decilm({block({{"replace_with_linear", true}}, {{"ffn_mult", 1.0}}), ok}));
  mc.parallel_residual = true;
  EXPECT_THROW(mc.validate(), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
