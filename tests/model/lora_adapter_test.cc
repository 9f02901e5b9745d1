// PEFT LoRA adapters: adapter_config.json, the weights' mapping onto slots, the
// refusals, and merging into the weights.
#include "model/lora_adapter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/quant.h"
#include "io/safetensors.h"
#include "io/torch_test_util.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;
using testing_util::expect_invalid;

// hd 4, q 16, kv 8, I 24, two layers.
const Json kLlama = Json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16,
  "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 32, "max_position_embeddings": 64})");

Tensor random(Shape shape, uint32_t seed, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.f - 1.f;
  }
  return dtype == DType::kF32 ? t : t.to(dtype);
}

float at(const Tensor& t, int64_t i) {
  return load_as_f32(t.raw(), t.dtype(), i);
}

class LoraAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tachyon_lora_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes adapter_config.json (`extra` merged over r / lora_alpha / target_modules) and
  // adapter_model.safetensors.
  void write(const Json& extra, const NamedTensors& tensors) {
    Json c = {{"peft_type", "LORA"},
              {"r", 2},
              {"lora_alpha", 4},
              {"target_modules",
               {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
              {"bias", "none"},
              {"task_type", "CAUSAL_LM"},
              {"some_future_field", {{"x", 1}}}};
    for (const auto& [k, v] : extra.items()) c[k] = v;
    std::ofstream(dir_ / "adapter_config.json") << c.dump();
    write_safetensors((dir_ / "adapter_model.safetensors").string(), tensors);
  }
  // A and B of `module` (rank r) of a weight [n, k].
  static void add(NamedTensors& t, const std::string& module, int64_t r, int64_t n, int64_t k,
                  uint32_t seed, DType dtype = DType::kF32) {
    t.emplace_back("base_model.model." + module + ".lora_A.weight", random({r, k}, seed, dtype));
    t.emplace_back("base_model.model." + module + ".lora_B.weight",
                   random({n, r}, seed + 1000, dtype));
  }
  LoraAdapter load(const Json& model = kLlama, LoraLimits limits = {}) {
    return load_lora_adapter(dir_.string(), testing_util::map(model),
                             testing_util::weights_of(model), limits);
  }
  fs::path dir_;
};

const std::string kQ0 = "model.layers.0.self_attn.q_proj";
const std::string kV1 = "model.layers.1.self_attn.v_proj";

TEST_F(LoraAdapterTest, PlainScalingSortedModulesAndBytes) {
  NamedTensors t;
  add(t, kV1, 2, 8, 16, 1, DType::kBF16);
  add(t, "model.layers.0.mlp.down_proj", 2, 16, 24, 2, DType::kF16);
  add(t, kQ0, 2, 16, 16, 3);
  write({}, t);
  const LoraAdapter a = load();
  ASSERT_EQ(a.modules.size(), 3u);
  EXPECT_EQ(a.modules[0].slot, Slot::kQ);
  EXPECT_EQ(a.modules[1].slot, Slot::kDown);
  EXPECT_EQ(a.modules[2].slot, Slot::kV);
  EXPECT_EQ(a.modules[2].layer, 1);
  EXPECT_EQ(a.modules[2].name, kV1);
  EXPECT_EQ(a.modules[2].stacked_row, 16 + 8);
  EXPECT_EQ(a.max_rank, 2);
  EXPECT_EQ(a.bytes, (2 * 16 + 8 * 2) * 2u + (2 * 24 + 16 * 2) * 2u + (2 * 16 + 16 * 2) * 4u);
  // alpha / r = 2, folded into B; A as stored, both f32.
  const LoraModule& v = a.modules[2];
  ASSERT_EQ(v.a.dtype(), DType::kF32);
  ASSERT_EQ(v.b.shape(), (Shape{8, 2}));
  const Tensor a_file = t[0].second, b_file = t[1].second;
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(v.a.data<float>()[i], at(a_file, i));
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(v.b.data<float>()[i], 2.f * at(b_file, i));
}

TEST_F(LoraAdapterTest, RsLoraScalesBySqrtRank) {
  NamedTensors t;
  add(t, kQ0, 4, 16, 16, 1);
  write({{"r", 4}, {"lora_alpha", 6}, {"use_rslora", true}}, t);
  const LoraAdapter a = load();
  ASSERT_EQ(a.modules.size(), 1u);
  EXPECT_EQ(a.modules[0].rank(), 4);
  EXPECT_FLOAT_EQ(a.modules[0].b.data<float>()[5], at(t[1].second, 5) * 3.f);  // 6 / sqrt(4)
}

TEST_F(LoraAdapterTest, RankAndAlphaPatterns) {
  NamedTensors t;
  add(t, kQ0, 2, 16, 16, 1);
  add(t, "model.layers.1.self_attn.q_proj", 8, 16, 16, 2);
  add(t, "model.layers.1.self_attn.o_proj", 2, 16, 16, 3);
  // Key order as written: the first matching key wins ("o_proj" before the longer key).
  const std::string text = R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4,
    "rank_pattern": {"layers.1.self_attn.q_proj": 8},
    "alpha_pattern": {"o_proj": 1, "model.layers.1.self_attn.o_proj": 100, "q_proj": 32}})";
  write_safetensors((dir_ / "adapter_model.safetensors").string(), t);
  std::ofstream(dir_ / "adapter_config.json") << text;
  const LoraAdapter a = load();
  ASSERT_EQ(a.modules.size(), 3u);
  EXPECT_EQ(a.modules[0].rank(), 2);
  EXPECT_EQ(a.modules[1].rank(), 8);
  EXPECT_EQ(a.max_rank, 8);
  EXPECT_FLOAT_EQ(a.modules[0].b.data<float>()[0], at(t[1].second, 0) * 16.f);  // 32 / 2
  EXPECT_FLOAT_EQ(a.modules[1].b.data<float>()[0], at(t[3].second, 0) * 4.f);   // 32 / 8
  EXPECT_FLOAT_EQ(a.modules[2].b.data<float>()[0], at(t[5].second, 0) * 0.5f);  // 1 / 2
}

TEST_F(LoraAdapterTest, PatternKeysMatchAtComponentBoundaries) {
  NamedTensors t;
  add(t, kQ0, 2, 16, 16, 1);
  // "_proj" and "self_attn.q" are not whole trailing components of the name; "q_pr.j" is
  // a regular expression that is.
  write({{"alpha_pattern", {{"_proj", 100}, {"self_attn.q", 100}, {"q_pr.j", 8}}}}, t);
  EXPECT_FLOAT_EQ(load().modules[0].b.data<float>()[0], at(t[1].second, 0) * 4.f);
  write({{"rank_pattern", {{"layers.0.self_attn.q_proj", 3}}}}, t);
  expect_invalid([&] { load(); }, {kQ0.c_str(), "rank 3"});
}

TEST_F(LoraAdapterTest, TargetModulesAsPeftMatchesThem) {
  NamedTensors t;
  add(t, kQ0, 2, 16, 16, 1);
  add(t, kV1, 2, 8, 16, 2);
  write({{"target_modules", {"q_proj", "v_proj"}}}, t);
  EXPECT_EQ(load().modules.size(), 2u);
  write({{"target_modules", {"q_proj"}}}, t);
  expect_invalid([&] { load(); }, {kV1.c_str(), "target"});
  write({{"target_modules", {"proj", "self_attn.v_proj", kQ0}}}, t);  // "proj" is no component
  EXPECT_EQ(load().modules.size(), 2u);
  write({{"target_modules", R"(.*\.layers\.\d+\.self_attn\.(q|v)_proj)"}}, t);
  EXPECT_EQ(load().modules.size(), 2u);
  write({{"target_modules", "(q|v)_proj"}}, t);  // a string matches the whole name
  expect_invalid([&] { load(); }, kQ0.c_str());
  write({{"target_modules", "all-linear"}}, t);
  EXPECT_EQ(load().modules.size(), 2u);
  write({{"target_modules", "all-linear"}, {"layers_to_transform", {0}}}, t);
  expect_invalid([&] { load(); }, kV1.c_str());
  write({{"exclude_modules", "all-linear"}}, t);  // a regular expression here: no match
  EXPECT_EQ(load().modules.size(), 2u);
  write({{"target_modules", nullptr}}, t);
  EXPECT_EQ(load().modules.size(), 2u);
  write({{"exclude_modules", {"layers.1.self_attn.v_proj"}}}, t);
  expect_invalid([&] { load(); }, kV1.c_str());
  write({{"exclude_modules", ".*\\.0\\..*"}}, t);
  expect_invalid([&] { load(); }, kQ0.c_str());
  write({{"layers_to_transform", {1}}, {"target_modules", {"v_proj"}}}, t);
  expect_invalid([&] { load(); }, kQ0.c_str());
  write({{"layers_to_transform", 0}, {"layers_pattern", "layers"}}, t);
  expect_invalid([&] { load(); }, kV1.c_str());
  write({{"layers_to_transform", {0, 1}}, {"layers_pattern", {"h", "layers"}}}, t);
  EXPECT_EQ(load().modules.size(), 2u);
  write({{"layers_to_transform", {0, 1}}, {"layers_pattern", "blocks"}}, t);
  expect_invalid([&] { load(); }, kQ0.c_str());
  // As in PEFT, a module named in full escapes layers_to_transform.
  write({{"layers_to_transform", {1}}, {"target_modules", {kQ0, "v_proj"}}}, t);
  EXPECT_EQ(load().modules.size(), 2u);
}

TEST_F(LoraAdapterTest, ConfigRefusalsNameTheField) {
  NamedTensors t;
  add(t, kQ0, 2, 16, 16, 1);
  const std::vector<std::pair<Json, const char*>> cases = {
      {{{"peft_type", "IA3"}}, "IA3"},
      {{{"peft_type", 3}}, "peft_type"},
      {{{"r", 0}}, "'r'"},
      {{{"r", "8"}}, "'r'"},
      {{{"lora_alpha", "16"}}, "lora_alpha"},
      {{{"use_rslora", "yes"}}, "use_rslora"},
      {{{"bias", "all"}}, "bias"},
      {{{"bias", "lora_only"}}, "bias"},
      {{{"lora_bias", true}}, "lora_bias"},
      {{{"use_dora", true}}, "use_dora"},
      {{{"modules_to_save", {"lm_head"}}}, "modules_to_save"},
      {{{"layer_replication", {{0, 1}}}}, "layer_replication"},
      {{{"fan_in_fan_out", 1}}, "fan_in_fan_out"},
      {{{"target_modules", 5}}, "target_modules"},
      {{{"target_modules", {"q_proj", 1}}}, "target_modules"},
      {{{"target_modules", "(q_proj"}}, "target_modules"},
      {{{"exclude_modules", {{"a", 1}}}}, "exclude_modules"},
      {{{"rank_pattern", {{"q_proj", -1}}}}, "rank_pattern"},
      {{{"rank_pattern", {"q_proj"}}}, "rank_pattern"},
      {{{"alpha_pattern", {{"q_proj", "x"}}}}, "alpha_pattern"},
      {{{"alpha_pattern", {{"(?P<x>q)", 1}}}}, "alpha_pattern"},
      {{{"layers_to_transform", {0, "1"}}}, "layers_to_transform"},
      {{{"layers_pattern", 3}}, "layers_pattern"},
      {{{"layers_to_transform", {0}}, {"layers_pattern", "(layers"}}, "'(layers'"},
  };
  for (const auto& [extra, needle] : cases) {
    SCOPED_TRACE(extra.dump());
    write(extra, t);
    expect_invalid([&] { load(); }, {needle, "adapter_config.json", dir_.c_str()});
  }
  std::ofstream(dir_ / "adapter_config.json") << R"({"r": 2})";
  expect_invalid([&] { load(); }, "peft_type");
  std::ofstream(dir_ / "adapter_config.json") << R"({"peft_type": "LORA", "r": )";
  expect_invalid([&] { load(); }, "adapter_config.json");
}

TEST_F(LoraAdapterTest, WeightRefusalsNameTheModule) {
  auto refused = [&](const NamedTensors& t, std::initializer_list<const char*> needles,
                     const Json& extra = Json::object(), LoraLimits limits = {}) {
    write(extra, t);
    expect_invalid([&] { load(kLlama, limits); }, needles);
  };
  NamedTensors t;
  add(t, "model.embed_tokens", 2, 32, 16, 1);
  refused(t, {"model.embed_tokens", "embedding"}, {{"target_modules", nullptr}});
  t.clear();
  add(t, "lm_head", 2, 32, 16, 1);
  refused(t, {"'lm_head'", "lm_head"}, {{"target_modules", nullptr}});
  t.clear();
  add(t, "model.layers.0.self_attn.rotary_emb", 2, 16, 16, 1);
  refused(t, {"rotary_emb", "matches no weight"}, {{"target_modules", nullptr}});
  t.clear();
  add(t, "model.layers.0.input_layernorm", 2, 16, 16, 1);
  refused(t, {"input_layernorm", "attn_norm"}, {{"target_modules", nullptr}});
  t.clear();
  add(t, "model.layers.2.self_attn.q_proj", 2, 16, 16, 1);
  refused(t, {"model.layers.2.self_attn.q_proj", "layer 2"});
  t.clear();
  t.emplace_back("base_model.model.model.embed_tokens.lora_embedding_A", random({2, 32}, 1));
  refused(t, {"lora_embedding_A", "embedding"});
  t.clear();
  add(t, kQ0, 2, 16, 16, 1);
  t.pop_back();
  refused(t, {kQ0.c_str(), "no lora_B"});
  t.clear();
  add(t, kQ0, 2, 16, 16, 1);
  t.emplace_back("base_model.model.lm_head.modules_to_save.default.weight", random({32, 16}, 2));
  refused(t, {"modules_to_save.default.weight", "not a LoRA weight"});
  t.pop_back();
  t.emplace_back("base_model.model." + kQ0 + ".lora_A.bias", random({2}, 2));
  refused(t, {"lora_A.bias", "bias"});
  t.pop_back();
  t.emplace_back("base_model.model." + kV1 + ".lora_A.other.weight", random({2, 16}, 2));
  refused(t, {"two adapters"});
  t.clear();
  add(t, kQ0, 2, 16, 16, 1);
  t[0].second = Tensor::zeros({2, 16}, DType::kI32);
  refused(t, {"lora_A", "dtype i32"});
  t.clear();
  add(t, kQ0, 2, 16, 8, 1);  // K 8 for a hidden size of 16
  refused(t, {kQ0.c_str(), "[2, 16]"});
  t.clear();
  add(t, kQ0, 4, 16, 16, 1);
  refused(t, {kQ0.c_str(), "rank 4", "largest served rank 2"}, {{"r", 4}}, {.max_rank = 2});
  write({{"r", 4}}, t);
  EXPECT_EQ(load(kLlama, {.max_rank = 4}).max_rank, 4);
}

TEST_F(LoraAdapterTest, PrunedLayersShapesAndAbsentBlocks) {
  ModelConfig cfg = testing_util::map(kLlama);
  const WeightMap map = testing_util::weights_of(kLlama);
  cfg.layer_inter_size = {12, 0};  // layer 0's MLP cut to 12, layer 1 has none
  NamedTensors t;
  add(t, "model.layers.0.mlp.down_proj", 2, 16, 12, 1);
  write({}, t);
  const LoraAdapter a = load_lora_adapter(dir_.string(), cfg, map, {});
  ASSERT_EQ(a.modules.size(), 1u);
  EXPECT_EQ(a.modules[0].a.shape(), (Shape{2, 12}));
  t.clear();
  add(t, "model.layers.1.mlp.up_proj", 2, 24, 16, 1);
  write({}, t);
  expect_invalid([&] { load_lora_adapter(dir_.string(), cfg, map, {}); },
                 {"model.layers.1.mlp.up_proj", "no ffn_up"});
}

TEST_F(LoraAdapterTest, NamedAdapterKeysAndBareBaseModelNames) {
  NamedTensors t;
  t.emplace_back("base_model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
                 random({2, 16}, 1));
  t.emplace_back("base_model.model.layers.0.self_attn.q_proj.lora_B.default.weight",
                 random({16, 2}, 2));
  write({}, t);
  const LoraAdapter a = load();
  ASSERT_EQ(a.modules.size(), 1u);
  EXPECT_EQ(a.modules[0].slot, Slot::kQ);
  EXPECT_EQ(a.modules[0].name, "layers.0.self_attn.q_proj");
}

TEST_F(LoraAdapterTest, TorchBinWeights) {
  NamedTensors t;
  add(t, kQ0, 2, 16, 16, 1);
  write({}, t);
  fs::remove(dir_ / "adapter_model.safetensors");
  std::vector<testing::TensorSpec> specs;
  std::vector<std::pair<std::string, std::string>> storages;
  for (size_t i = 0; i < t.size(); ++i) {
    const Tensor& x = t[i].second;
    specs.push_back(
        {t[i].first, "FloatStorage", std::to_string(i), x.numel(), 0, x.shape(), {x.dim(1), 1}});
    storages.emplace_back(std::to_string(i),
                          std::string(static_cast<const char*>(x.raw()), x.nbytes()));
  }
  std::ofstream(dir_ / "adapter_model.bin", std::ios::binary)
      << testing::torch_zip(testing::state_dict_pickle(specs), storages);
  const LoraAdapter a = load();
  ASSERT_EQ(a.modules.size(), 1u);
  EXPECT_EQ(a.modules[0].slot, Slot::kQ);
  for (int64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(a.modules[0].a.data<float>()[i], at(t[0].second, i));
    EXPECT_EQ(a.modules[0].b.data<float>()[i], 2.f * at(t[1].second, i));
  }
}

TEST_F(LoraAdapterTest, MissingFilesAreNotFound) {
  EXPECT_THROW(load(), NotFound);
  std::ofstream(dir_ / "adapter_config.json") << R"({"peft_type": "LORA", "r": 2})";
  EXPECT_THROW(load(), NotFound);
}

TEST_F(LoraAdapterTest, MoeRouterAndExpertsRefused) {
  const Json mixtral = Json::parse(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 16,
    "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_local_experts": 2, "vocab_size": 32,
    "max_position_embeddings": 64})");
  NamedTensors t;
  add(t, "model.layers.0.block_sparse_moe.gate", 2, 2, 16, 1);
  write({{"target_modules", nullptr}}, t);
  expect_invalid([&] { load(mixtral); }, {"block_sparse_moe.gate", "router"});
  t.clear();
  add(t, "model.layers.0.block_sparse_moe.experts.1.w1", 2, 24, 16, 1);
  write({{"target_modules", nullptr}}, t);
  expect_invalid([&] { load(mixtral); }, {"experts.1.w1", "expert"});
  t.clear();
  add(t, kQ0, 2, 16, 16, 1);
  write({}, t);
  EXPECT_EQ(load(mixtral).modules.size(), 1u);
}

TEST_F(LoraAdapterTest, PerHeadQkvRowsReorderedLikeTheWeight) {
  const Json neox = Json::parse(R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 16,
    "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
    "vocab_size": 32, "max_position_embeddings": 64, "rotary_pct": 0.5})");
  const int64_t heads = 4, hd = 4, r = 2;
  NamedTensors t;
  add(t, "gpt_neox.layers.0.attention.query_key_value", r, 3 * heads * hd, 16, 1);
  add(t, "gpt_neox.layers.0.mlp.dense_h_to_4h", r, 32, 16, 2);
  write({{"target_modules", {"query_key_value", "dense_h_to_4h"}}, {"lora_alpha", 2}}, t);
  const LoraAdapter a = load(neox);
  ASSERT_EQ(a.modules.size(), 2u);
  EXPECT_EQ(a.modules[0].slot, Slot::kQkv);
  EXPECT_EQ(a.modules[1].slot, Slot::kUp);
  EXPECT_EQ(a.modules[1].stacked_row, 0);
  const Tensor& b = a.modules[0].b;
  const Tensor& file_b = t[1].second;  // rows [head][q, k, v][hd]
  for (int64_t part = 0; part < 3; ++part)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < hd; ++d)
        for (int64_t j = 0; j < r; ++j)
          EXPECT_EQ(b.data<float>()[((part * heads + h) * hd + d) * r + j],
                    at(file_b, ((h * 3 + part) * hd + d) * r + j));
}

// W + B·A in double, rounded to the weight's dtype only at the end.
void expect_merged(const Tensor& before, const Tensor& after, const LoraModule& m, int64_t row0,
                   double tol) {
  ASSERT_EQ(after.shape(), before.shape());
  ASSERT_EQ(after.dtype(), before.dtype());
  const int64_t k = before.dim(1), r = m.rank();
  for (int64_t i = 0; i < before.dim(0); ++i)
    for (int64_t c = 0; c < k; ++c) {
      double want = at(before, i * k + c);
      if (i >= row0 && i < row0 + m.b.dim(0))
        for (int64_t j = 0; j < r; ++j)
          want += double{m.b.data<float>()[(i - row0) * r + j]} * m.a.data<float>()[j * k + c];
      ASSERT_NEAR(at(after, i * k + c), want, tol * (1 + std::abs(want))) << i << ", " << c;
    }
}

TEST_F(LoraAdapterTest, MergeAddsBTimesAIntoEachWeight) {
  NamedTensors t;
  add(t, kQ0, 2, 16, 16, 1);
  add(t, "model.layers.0.self_attn.k_proj", 2, 8, 16, 2);
  add(t, "model.layers.1.mlp.up_proj", 2, 24, 16, 3);
  write({}, t);
  const LoraAdapter a = load();
  ModelWeights w;
  w.layers.resize(2);
  w.layers[0].q.w = random({16, 16}, 10);                     // f32, its own matrix
  w.layers[0].k.w = random({8, 16}, 11, DType::kBF16);        // bf16
  w.layers[1].gate_up.w = random({48, 16}, 12, DType::kF16);  // stacked [gate; up]
  const Tensor q = w.layers[0].q.w, k = w.layers[0].k.w, gu = w.layers[1].gate_up.w;
  merge_lora(w, a);
  expect_merged(q, w.layers[0].q.w, a.modules[0], 0, 1e-6);
  expect_merged(k, w.layers[0].k.w, a.modules[1], 0, 1.0 / 128);
  expect_merged(gu, w.layers[1].gate_up.w, a.modules[2], 24, 1.0 / 1024);
  EXPECT_NE(w.layers[0].q.w.raw(), q.raw());

  // q and k stacked in one qkv [q 16; k 8; v 8]: each into its rows.
  ModelWeights s;
  s.layers.resize(2);
  s.layers[0].qkv.w = random({32, 16}, 13);
  const Tensor qkv = s.layers[0].qkv.w;
  LoraAdapter qk = a;
  qk.modules.pop_back();
  merge_lora(s, qk);
  expect_merged(qkv.slice_rows(0, 16), s.layers[0].qkv.w.slice_rows(0, 16), qk.modules[0], 0, 1e-6);
  expect_merged(qkv.slice_rows(16, 32), s.layers[0].qkv.w.slice_rows(16, 32), qk.modules[1], 0,
                1e-6);
}

TEST_F(LoraAdapterTest, MergeRefusesQuantizedAndAbsentWeightsChangingNothing) {
  NamedTensors t;
  add(t, kQ0, 2, 16, 16, 1);
  add(t, "model.layers.0.self_attn.o_proj", 2, 16, 16, 2);
  write({}, t);
  const LoraAdapter a = load();
  ModelWeights w;
  w.layers.resize(2);
  w.layers[0].q.w = random({16, 16}, 10);
  const void* before = w.layers[0].q.w.raw();
  expect_invalid([&] { merge_lora(w, a); }, {"o_proj", "no weight attn_o"});
  EXPECT_EQ(w.layers[0].q.w.raw(), before);
  w.layers[0].o.w = quantized_view(quantize_int(random({16, 16}, 11), 8, 16, true));
  expect_invalid([&] { merge_lora(w, a); }, {"o_proj", "quantized"});
  EXPECT_EQ(w.layers[0].q.w.raw(), before);
  w.layers[0].o.w = random({16, 8}, 12);
  expect_invalid([&] { merge_lora(w, a); }, {"o_proj", "f32[16, 8]"});
  EXPECT_EQ(w.layers[0].q.w.raw(), before);
}

}  // namespace
}  // namespace tachyon
