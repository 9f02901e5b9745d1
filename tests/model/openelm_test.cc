// OpenELM's config: the per-layer heads, KV heads and FFN widths its config class
// recomputes from the multipliers (numpy.linspace, Python's round to 2 decimals,
// make_divisible), and the refusals naming the field. Logits are checked against the
// reference of the conformance fixture tests/conformance/fixtures/openelm.
#include <gtest/gtest.h>

#include <vector>

#include "core/json.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

using testing_util::expect_invalid;
using testing_util::map;

Json openelm(Json fields) {
  Json j = {{"architectures", {"OpenELMForCausalLM"}},
            {"model_type", "openelm"},
            {"vocab_size", 512},
            {"max_context_length", 256},
            {"share_input_output_layers", true}};
  for (auto& [k, v] : fields.items()) j[k] = v;
  return j;
}

TEST(OpenELM, FixtureShapesFromTheMultipliers) {
  const ModelConfig mc = map(openelm({{"model_dim", 128},
                                      {"head_dim", 16},
                                      {"num_gqa_groups", 2},
                                      {"num_transformer_layers", 4},
                                      {"qkv_multipliers", {0.5, 1.0}},
                                      {"ffn_multipliers", {0.5, 4.0}},
                                      {"ffn_dim_divisor", 32},
                                      {"normalize_qk_projections", true},
                                      {"rope_freq_constant", 5000}}));
  EXPECT_EQ(mc.family, "openelm");
  EXPECT_EQ(mc.layer_head_num, (std::vector<int32_t>{4, 6, 6, 8}));
  EXPECT_EQ(mc.layer_head_num_kv, (std::vector<int32_t>{2, 3, 3, 4}));
  EXPECT_EQ(mc.layer_inter_size, (std::vector<int64_t>{64, 224, 352, 512}));
  EXPECT_TRUE(mc.qk_norm);
  EXPECT_TRUE(mc.gated_mlp);
  EXPECT_TRUE(mc.tie_word_embeddings);
  EXPECT_EQ(mc.norm_eps, 1e-6);
  EXPECT_EQ(mc.rope.theta, 5000.0);
  EXPECT_EQ(mc.rope.dim, 16);
  EXPECT_EQ(mc.activation, Activation::kSilu);
  EXPECT_EQ(mc.bos_token_id, 1);
  EXPECT_EQ(mc.eos_token_ids, (std::vector<int64_t>{2}));
}

// 5 layers: linspace gives 0.625 and 0.875 (and 1.375, 3.125), which Python's round
// takes to 0.62 and 0.88 (ties to even on the exact binary value); 0.63 would give 63
// heads. make_divisible's floor of one divisor and its 10% rule shape the widths.
TEST(OpenELM, RoundingAsTheConfigClass) {
  const ModelConfig mc = map(openelm({{"model_dim", 400},
                                      {"head_dim", 4},
                                      {"num_transformer_layers", 5},
                                      {"qkv_multipliers", {0.5, 1.0}},
                                      {"ffn_multipliers", {0.5, 4.0}},
                                      {"ffn_dim_divisor", 256}}));
  EXPECT_EQ(mc.layer_head_num, (std::vector<int32_t>{50, 62, 75, 88, 100}));
  EXPECT_EQ(mc.layer_head_num_kv, (std::vector<int32_t>{50, 62, 75, 88, 100}));
  EXPECT_EQ(mc.layer_inter_size, (std::vector<int64_t>{256, 512, 1024, 1280, 1536}));
}

// A single multiplier for every layer, FFN multipliers listed per layer (as the config
// class saves them), and stored head lists that agree.
TEST(OpenELM, UniformAndListedMultipliers) {
  const ModelConfig mc = map(openelm({{"model_dim", 256},
                                      {"head_dim", 64},
                                      {"num_gqa_groups", 4},
                                      {"num_transformer_layers", 3},
                                      {"qkv_multipliers", 1.0},
                                      {"ffn_multipliers", {1.0, 2.0, 3.0}},
                                      {"num_query_heads", {4, 4, 4}},
                                      {"num_kv_heads", {1, 1, 1}}}));
  EXPECT_EQ(mc.layer_head_num, (std::vector<int32_t>{4, 4, 4}));
  EXPECT_EQ(mc.layer_head_num_kv, (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(mc.layer_inter_size, (std::vector<int64_t>{256, 512, 768}));
}

TEST(OpenELM, RefusalsNameTheField) {
  const Json base = openelm({{"model_dim", 256},
                             {"head_dim", 64},
                             {"num_transformer_layers", 3},
                             {"qkv_multipliers", {0.5, 1.0}}});
  auto with = [&](const char* k, Json v) {
    Json j = base;
    j[k] = std::move(v);
    return j;
  };
  expect_invalid(
      [&] {
        map(with("num_query_heads", {2, 3, 3}));
      },
      {"num_query_heads", "[2, 3, 4]"});
  expect_invalid([&] { map(with("qkv_multipliers", {0.5, 0.7, 1.0})); }, "qkv_multipliers");
  expect_invalid([&] { map(with("ffn_multipliers", {1.0, 2.0, 3.0, 4.0})); }, "ffn_multipliers");
  expect_invalid([&] { map(with("ffn_multipliers", {1.0, -2.0})); }, "ffn_multipliers");
  expect_invalid([&] { map(with("head_dim", 48)); }, {"model_dim", "head_dim"});
}

}  // namespace
}  // namespace tachyon
