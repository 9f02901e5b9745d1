// The first ChatGLM-6B: its config mapping (the hub's config.json fields, the refusals
// that name the field), its weight mapping, the prompt layout and 2-D position rule of
// its modeling file, the 2-D rotary table, and the decoder's handling of layouts on the
// chatglm6b conformance fixture (whose logits and greedy tokens the conformance test
// checks against a float64 port of the modeling file).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_test_util.h"
#include "model/prompt_layout.h"
#include "model/registry.h"
#include "model/rope.h"

namespace tachyon {
namespace {

using testing_util::expect_invalid;
using testing_util::map;
using testing_util::weights_of;

using testing_util::fixture;
using testing_util::one_seq;

// THUDM/chatglm-6b's config.json, with the sizes of a small model.
Json chatglm6b_json() {
  return Json::parse(R"({"_name_or_path": "THUDM/chatglm-6b", "architectures": ["ChatGLMModel"],
    "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                 "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
                 "AutoModelForSeq2SeqLM": "modeling_chatglm.ChatGLMForConditionalGeneration"},
    "bos_token_id": 130004, "eos_token_id": 130005, "mask_token_id": 130000,
    "gmask_token_id": 130001, "pad_token_id": 3, "hidden_size": 96, "inner_hidden_size": 384,
    "layernorm_epsilon": 1e-05, "max_sequence_length": 2048, "model_type": "chatglm",
    "num_attention_heads": 6, "num_layers": 7, "position_encoding_2d": true,
    "quantization_bit": 0, "pre_seq_len": null, "prefix_projection": false,
    "torch_dtype": "float16", "transformers_version": "4.27.1", "use_cache": true,
    "vocab_size": 130528})");
}

TEST(ChatGLM6BConfig, HubFieldsMapOntoTheFrameworkFlags) {
  for (const char* arch : {"ChatGLMModel", "ChatGLMForConditionalGeneration"}) {
    Json j = chatglm6b_json();
    j["architectures"] = {arch};
    const ModelConfig m = map(j);
    EXPECT_EQ(m.family, "chatglm6b");
    EXPECT_EQ(m.architecture, arch);
    EXPECT_EQ(m.model_type, "chatglm");
    EXPECT_EQ(m.head_num, 6);
    EXPECT_EQ(m.head_num_kv, 6);
    EXPECT_EQ(m.size_per_head, 16);
    EXPECT_EQ(m.layer_num, 7);
    EXPECT_EQ(m.inter_size, 384);
    EXPECT_EQ(m.vocab_size, 130528);
    EXPECT_EQ(m.max_seq_len, 2048);
    EXPECT_EQ(m.norm_type, NormType::kLayerNorm);
    EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
    EXPECT_EQ(m.activation, Activation::kGeluTanh);
    EXPECT_FALSE(m.gated_mlp);
    EXPECT_TRUE(m.qkv_bias && m.o_bias && m.mlp_bias);
    EXPECT_TRUE(m.qkv_per_head_layout);
    EXPECT_TRUE(m.tie_word_embeddings);
    EXPECT_EQ(m.position, PositionType::kRotary);
    EXPECT_EQ(m.rope.style, RotaryStyle::kHalf2D);
    EXPECT_EQ(m.rope.dim, 16);  // both halves of every head
    EXPECT_EQ(m.rope.theta, 10000.0);
    EXPECT_TRUE(m.rope.inv_freq_f16);
    EXPECT_TRUE(m.glm_2d_positions());
    EXPECT_TRUE(m.bidirectional_context);
    EXPECT_EQ(m.glm_prompt.context_end_token, 130004);
    EXPECT_EQ(m.glm_prompt.mask_token_ids, (std::vector<int64_t>{130001, 130000}));
    EXPECT_TRUE(m.residual_from_norm);
    EXPECT_DOUBLE_EQ(m.residual_scale, std::sqrt(14.0));
    // query_key_layer_scaling_coeff divides and multiplies again: 1 / sqrt(head_dim).
    EXPECT_DOUBLE_EQ(m.softmax_scale(0), 0.25);
    EXPECT_DOUBLE_EQ(m.softmax_scale(6), 0.25);
    EXPECT_EQ(m.eos_token_ids, (std::vector<int64_t>{130005}));
    EXPECT_EQ(m.pad_token_id, 3);
    EXPECT_EQ(m.dtype, DType::kF16);
    EXPECT_TRUE(m.needs_prompt_layout());
  }
  // By name as well; ChatGLM2's -32k reading of the same names refuses it.
  EXPECT_EQ(map(chatglm6b_json(), "chatglm6b").family, "chatglm6b");
  expect_invalid([] { map(chatglm6b_json(), "chatglm2"); }, "ChatGLM2-6B-32k");
  // The ChatGLMConfig defaults of the fields a config may leave out.
  Json sparse = chatglm6b_json();
  for (const char* f : {"inner_hidden_size", "layernorm_epsilon", "max_sequence_length",
                        "bos_token_id", "eos_token_id", "mask_token_id", "gmask_token_id"})
    sparse.erase(f);
  const ModelConfig d = map(sparse);
  EXPECT_EQ(d.inter_size, 16384);
  EXPECT_EQ(d.max_seq_len, 2048);
  EXPECT_EQ(d.glm_prompt.context_end_token, 130004);
  EXPECT_EQ(d.glm_prompt.mask_token_ids, (std::vector<int64_t>{130001, 130000}));
  EXPECT_EQ(d.eos_token_ids, (std::vector<int64_t>{130005}));
  // tie_word_embeddings, when a config says false, is honoured.
  Json untied = chatglm6b_json();
  untied["tie_word_embeddings"] = false;
  EXPECT_FALSE(map(untied).tie_word_embeddings);
}

TEST(ChatGLM6BConfig, UnsupportedVariantsAreRefusedByField) {
  const struct {
    const char* field;
    Json value;
    const char* needle;
  } cases[] = {
      {"position_encoding_2d", false, "position_encoding_2d"},
      {"quantization_bit", 4, "quantization_bit"},
      {"pre_seq_len", 128, "pre_seq_len"},
      {"hidden_size", 60, "multiple of 4"},  // heads of 10 dims: not two even rotaries
      {"hidden_size", 100, "hidden_size"},
      {"gmask_token_id", 200000, "200000"},
  };
  for (const auto& c : cases) {
    Json j = chatglm6b_json();
    j[c.field] = c.value;
    expect_invalid([&] { map(j); }, c.needle);
  }
  Json j = chatglm6b_json();
  j.erase("num_layers");
  expect_invalid([&] { map(j); }, "num_layers");
}

TEST(ChatGLM6BWeights, TensorNamesAndTransforms) {
  WeightMap w = weights_of(chatglm6b_json());
  const std::string l = "transformer.layers.{L}.";
  const std::pair<Slot, std::string> names[] = {
      {Slot::kEmbedding, "transformer.word_embeddings.weight"},
      {Slot::kAttnNorm, l + "input_layernorm.weight"},
      {Slot::kAttnNormBias, l + "input_layernorm.bias"},
      {Slot::kQkv, l + "attention.query_key_value.weight"},
      {Slot::kQkvBias, l + "attention.query_key_value.bias"},
      {Slot::kO, l + "attention.dense.weight"},
      {Slot::kOBias, l + "attention.dense.bias"},
      {Slot::kMlpNorm, l + "post_attention_layernorm.weight"},
      {Slot::kMlpNormBias, l + "post_attention_layernorm.bias"},
      {Slot::kUp, l + "mlp.dense_h_to_4h.weight"},
      {Slot::kUpBias, l + "mlp.dense_h_to_4h.bias"},
      {Slot::kDown, l + "mlp.dense_4h_to_h.weight"},
      {Slot::kDownBias, l + "mlp.dense_4h_to_h.bias"},
      {Slot::kFinalNorm, "transformer.final_layernorm.weight"},
      {Slot::kFinalNormBias, "transformer.final_layernorm.bias"},
      {Slot::kLmHead, "lm_head.weight"},
  };
  EXPECT_EQ(w.size(), std::size(names));
  for (const auto& [slot, name] : names) {
    ASSERT_TRUE(w.count(slot)) << slot_name(slot);
    EXPECT_EQ(w[slot].name, name);
  }
  EXPECT_EQ(w[Slot::kQkv].transform, WeightTransform::kQkvPerHead);
  EXPECT_EQ(w[Slot::kQkvBias].transform, WeightTransform::kQkvPerHead);
  EXPECT_EQ(w[Slot::kO].transform, WeightTransform::kNone);
  EXPECT_TRUE(w[Slot::kLmHead].optional);
}

// A small config with the hub's id layout shifted into a vocabulary of 64.
ModelConfig small_config() {
  Json j = chatglm6b_json();
  j["vocab_size"] = 64;
  j["mask_token_id"] = 50;
  j["gmask_token_id"] = 51;
  j["bos_token_id"] = 54;
  j["eos_token_id"] = 55;
  return map(j);
}

TEST(ChatGLM6BPromptLayout, ContextEndsAtSopAndGMaskWinsOverMask) {
  const ModelConfig m = small_config();
  constexpr int32_t kMask = 50, kGMask = 51, kSop = 54;
  // The tokenizer's layout: text [gMASK] <sop>.
  PromptLayout p = make_prompt_layout(m, std::vector<int32_t>{7, 8, 9, kGMask, kSop});
  EXPECT_EQ(p.context_len, 4);
  EXPECT_EQ(p.mask_position, 3);
  EXPECT_TRUE(p.bidirectional);
  EXPECT_EQ(p.atomic_len(), 4);
  // [MASK] alone anchors; with both, the first [gMASK] does, wherever [MASK] is.
  p = make_prompt_layout(m, std::vector<int32_t>{7, kMask, 9, 10, kSop, 11});
  EXPECT_EQ(p.context_len, 4);
  EXPECT_EQ(p.mask_position, 1);
  p = make_prompt_layout(m, std::vector<int32_t>{kMask, 7, kGMask, 8, kGMask, kSop, kSop});
  EXPECT_EQ(p.context_len, 5);  // the first <sop>
  EXPECT_EQ(p.mask_position, 2);
  // A [gMASK] after the first <sop> still wins, as the modeling file's index() finds it.
  p = make_prompt_layout(m, std::vector<int32_t>{kMask, kSop, kGMask});
  EXPECT_EQ(p.context_len, 1);
  EXPECT_EQ(p.mask_position, 2);
  // What the modeling file cannot take.
  expect_invalid([&] { make_prompt_layout(m, std::vector<int32_t>{7, 8, kGMask}); }, "54");
  expect_invalid([&] { make_prompt_layout(m, std::vector<int32_t>{7, 8, kSop}); }, "mask token");
  // A model without the rule keeps the default layout.
  ModelConfig plain = m;
  plain.glm_prompt = {};
  EXPECT_EQ(make_prompt_layout(plain, std::vector<int32_t>{7, 8}), PromptLayout{});
}

TEST(ChatGLM6BPromptLayout, PositionsFollowGetPositionIdsAndTheDecodingUpdate) {
  // get_position_ids for [a b [MASK] c [gMASK] <sop> d] with context_length 5 and mask
  // position 4, then two generated tokens (position copied, block position + 1).
  const PromptLayout p{5, true, 4};
  const int32_t want_pos[] = {0, 1, 2, 3, 4, 4, 4, 4, 4};
  const int32_t want_block[] = {0, 0, 0, 0, 0, 1, 2, 3, 4};
  for (int32_t i = 0; i < 9; ++i) {
    EXPECT_EQ(glm_position(p, i).position, want_pos[i]) << i;
    EXPECT_EQ(glm_position(p, i).block, want_block[i]) << i;
  }
}

TEST(ChatGLM6BRope, TwoDTableTurnsEachHalfByItsOwnPosition) {
  const ModelConfig m = small_config();
  RopeTable table(m.rope);
  const int32_t rot = m.rope.dim, q = rot / 4;  // 4 frequencies per half of 8 dims
  const int32_t pos[] = {0, 3, 4, 4, 1000}, block[] = {0, 0, 1, 2, 7};
  const int32_t lens[] = {1, 1, 1, 1, 1};
  std::vector<float> out(5 * rot);
  table.fill(pos, lens, 5, out.data(), block);
  double off_unrounded = 0;  // how far the table is from unrounded frequencies
  for (int32_t i = 0; i < q; ++i) {
    // RotaryEmbedding(head_dim / 2): inv_freq = 1 / 10000^(2i / (head_dim / 2)), .half().
    const double exact = 1.0 / std::pow(10000.0, 2.0 * i / (rot / 2));
    const double f = f16_to_f32(f32_to_f16(static_cast<float>(exact)));
    off_unrounded =
        std::max(off_unrounded, std::abs(double{out[4 * rot + i]} - std::cos(pos[4] * exact)));
    for (int t = 0; t < 5; ++t) {
      const float* row = out.data() + t * rot;
      EXPECT_NEAR(row[i], std::cos(pos[t] * f), 1e-6) << t << " " << i;
      EXPECT_NEAR(row[q + i], std::cos(block[t] * f), 1e-6) << t << " " << i;
      EXPECT_NEAR(row[2 * q + i], std::sin(pos[t] * f), 1e-6) << t << " " << i;
      EXPECT_NEAR(row[3 * q + i], std::sin(block[t] * f), 1e-6) << t << " " << i;
    }
  }
  EXPECT_GT(off_unrounded, 1e-4);  // the table's frequencies are the float16-rounded ones
  // Without block positions a 2-D table cannot be filled.
  EXPECT_THROW(table.fill(pos, lens, 5, out.data()), Error);
}

class ChatGLM6BFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    LoadOptions cpu;
    cpu.device = Device{};  // exact comparisons of float32 steps
    model_ = load_model(fixture("chatglm6b"), cpu);
    model_->init_kv_cache(16, 4);
  }

  // The prompt's logits, computed in one step or in chunks of the given sizes.
  Tensor logits(const std::vector<int32_t>& prompt, std::vector<int32_t> chunks = {},
                bool with_layout = true) {
    const int32_t n = static_cast<int32_t>(prompt.size());
    if (chunks.empty()) chunks = {n};
    const PromptLayout layout = model_->prompt_layout(prompt);
    Tensor out = Tensor::empty({n, model_->vocab_size()}, DType::kF32);
    int32_t done = 0;
    for (int32_t c : chunks) {
      ForwardBatch b = one_seq({prompt.begin() + done, prompt.begin() + done + c}, done,
                               {3, 1, 4, 0, 5, 9, 2, 6});
      b.logits_rows.resize(static_cast<size_t>(c));
      std::iota(b.logits_rows.begin(), b.logits_rows.end(), 0);
      if (with_layout) b.layouts = {layout};
      Tensor l = model_->forward(b);
      std::copy_n(l.data<float>(), l.numel(), out.data<float>() + int64_t{done} * l.dim(1));
      done += c;
    }
    return out;
  }

  static double row_diff(const Tensor& a, const Tensor& b, int64_t row) {
    double d = 0;
    const int64_t V = a.dim(1);
    for (int64_t v = 0; v < V; ++v)
      d = std::max(d,
                   std::abs(double{a.data<float>()[row * V + v]} - b.data<float>()[row * V + v]));
    return d;
  }

  std::unique_ptr<Model> model_;
};

TEST_F(ChatGLM6BFixture, TheContextAttendsBothWaysAndTheBlockCausally) {
  // [text x4, [gMASK], <sop>, text x2]: context 5.
  const std::vector<int32_t> a = {10, 20, 30, 40, 225, 228, 50, 60};
  std::vector<int32_t> b = a;
  b[3] = 41;  // a later context token changes every row, the first included
  Tensor la = logits(a), lb = logits(b);
  for (int64_t r = 0; r < 8; ++r) EXPECT_GT(row_diff(la, lb, r), 1e-3) << r;
  std::vector<int32_t> c = a;
  c[7] = 61;  // a token of the block changes its own row only
  Tensor lc = logits(c);
  for (int64_t r = 0; r < 7; ++r) EXPECT_EQ(row_diff(la, lc, r), 0.0) << r;
  EXPECT_GT(row_diff(la, lc, 7), 1e-3);
  // Chunks after the context give the same logits as one step.
  Tensor chunked = logits(a, {5, 1, 2});
  for (int64_t r = 0; r < 8; ++r) EXPECT_LT(row_diff(la, chunked, r), 1e-5) << r;
}

TEST_F(ChatGLM6BFixture, ForwardRefusesMissingLayoutsAndSplitContexts) {
  const std::vector<int32_t> a = {10, 20, 30, 40, 225, 228, 50};
  EXPECT_THROW(logits(a, {}, /*with_layout=*/false), InvalidArgument);
  expect_invalid([&] { logits(a, {3, 4}); }, "bidirectional context of 5");
  expect_invalid([&] { logits(a, {4, 3}); }, "bidirectional context of 5");
  // A layout without the mask position 2-D positions need.
  ForwardBatch b = one_seq({10, 228}, 0, {0});
  b.layouts = {PromptLayout{1, true, -1}};
  expect_invalid([&] { model_->forward(b); }, "mask position");
  b.layouts = {PromptLayout{1, true, 0}, PromptLayout{}};
  expect_invalid([&] { model_->forward(b); }, "2 layouts for 1 sequences");
}

TEST(ChatGLM6BLayouts, CausalModelsRefuseABidirectionalLayout) {
  auto model = load_model(fixture("chatglm3"));
  model->init_kv_cache(4, 4);
  ForwardBatch b = one_seq({10, 11}, 0, {0});
  EXPECT_EQ(model->prompt_layout(b.token_ids), PromptLayout{});
  b.layouts = {PromptLayout{}};
  EXPECT_NO_THROW(model->forward(b));
  b.layouts = {PromptLayout{1, true, -1}};
  expect_invalid([&] { model->forward(b); }, "attends causally");
}

}  // namespace
}  // namespace tachyon
