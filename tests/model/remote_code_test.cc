// The remote-code families (Baichuan, ChatGLM, Qwen-1, InternLM, InternLM2): how their
// config.json fields map (variants told apart by the fields their modeling files read),
// the refusals that name the field, Qwen's dynamic NTK table and log-n scaling, and the
// NormHead row normalisation. Logits are checked against references by the conformance
// fixtures (tests/conformance/fixtures/{aquila,baichuan*,chatglm3,glm4_chatglm,qwen*,
// internlm*}).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_test_util.h"
#include "model/registry.h"
#include "model/rope.h"

namespace tachyon {
namespace {

using testing_util::expect_invalid;
using testing_util::map;
using testing_util::weights_of;

Json baichuan_json(const char* arch) {
  Json j = Json::parse(R"({"model_type": "baichuan", "hidden_size": 64,
    "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 512, "rms_norm_eps": 1e-6})");
  j["architectures"] = {arch};
  return j;
}

TEST(Baichuan, VariantsFollowTheFieldsTheirModelingFilesRead) {
  // Baichuan-7B: rotary.
  Json b7 = baichuan_json("BaiChuanForCausalLM");
  b7["max_position_embeddings"] = 4096;
  ModelConfig m = map(b7);
  EXPECT_EQ(m.family, "baichuan");
  EXPECT_EQ(m.position, PositionType::kRotary);
  EXPECT_EQ(m.max_seq_len, 4096);
  EXPECT_EQ(m.head_num_kv, 4);
  EXPECT_FALSE(m.lm_head_normalized);

  // Baichuan2-7B: rotary (max_position_embeddings) and NormHead (z_loss_weight).
  Json b2_7 = baichuan_json("BaichuanForCausalLM");
  b2_7["max_position_embeddings"] = 4096;
  b2_7["model_max_length"] = 4096;
  b2_7["z_loss_weight"] = 0;
  m = map(b2_7);
  EXPECT_EQ(m.position, PositionType::kRotary);
  EXPECT_TRUE(m.lm_head_normalized);

  // Baichuan-13B: only model_max_length, so ALiBi with Bloom's slopes, unscaled.
  Json b13 = baichuan_json("BaichuanForCausalLM");
  b13["model_max_length"] = 1024;
  m = map(b13);
  EXPECT_EQ(m.position, PositionType::kAlibi);
  EXPECT_EQ(m.alibi_style, AlibiStyle::kBloom);
  EXPECT_FALSE(m.alibi_scaled);
  EXPECT_EQ(m.max_seq_len, 1024);
  EXPECT_FALSE(m.lm_head_normalized);

  // Baichuan2-13B: the published vocabulary size, or the family named explicitly.
  Json b2_13 = b13;
  b2_13["vocab_size"] = 125696;
  EXPECT_TRUE(map(b2_13).lm_head_normalized);
  m = map(b13, "baichuan2");
  EXPECT_TRUE(m.lm_head_normalized);
  EXPECT_EQ(m.family, "baichuan2");
  EXPECT_EQ(m.architecture, "BaichuanForCausalLM");
  EXPECT_EQ(m.position, PositionType::kAlibi);

  WeightMap w = weights_of(b2_7);
  ASSERT_TRUE(w.count(Slot::kQkv));
  EXPECT_EQ(w[Slot::kQkv].name, "model.layers.{L}.self_attn.W_pack.weight");
  EXPECT_EQ(w[Slot::kLmHead].transform, WeightTransform::kNormalizeRows);
  EXPECT_FALSE(w.count(Slot::kQ));
  EXPECT_EQ(weights_of(b13)[Slot::kLmHead].transform, WeightTransform::kNone);
}

Json chatglm_json() {
  return Json::parse(R"({"architectures": ["ChatGLMModel"], "model_type": "chatglm",
    "add_bias_linear": false, "add_qkv_bias": true, "apply_residual_connection_post_layernorm": false,
    "ffn_hidden_size": 176, "hidden_size": 64, "kv_channels": 16, "layernorm_epsilon": 1e-5,
    "multi_query_attention": true, "multi_query_group_num": 2, "num_attention_heads": 4,
    "num_layers": 2, "original_rope": true, "padded_vocab_size": 512, "post_layer_norm": true,
    "rmsnorm": true, "seq_length": 256, "eos_token_id": 2, "pad_token_id": 0})");
}

TEST(ChatGLM, FieldsRopeRatioAndLayouts) {
  ModelConfig m = map(chatglm_json());
  EXPECT_EQ(m.family, "chatglm");
  EXPECT_EQ(m.head_num, 4);
  EXPECT_EQ(m.head_num_kv, 2);
  EXPECT_EQ(m.size_per_head, 16);
  EXPECT_EQ(m.layer_num, 2);
  EXPECT_EQ(m.inter_size, 176);
  EXPECT_EQ(m.vocab_size, 512);
  EXPECT_EQ(m.max_seq_len, 256);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias);
  EXPECT_EQ(m.rope.style, RotaryStyle::kInterleaved);
  EXPECT_EQ(m.rope.dim, 8);  // half of each head
  EXPECT_EQ(m.rope.theta, 10000.0);
  EXPECT_FALSE(m.qkv_per_head_layout);
  EXPECT_EQ(weights_of(chatglm_json())[Slot::kQkv].transform, WeightTransform::kNone);

  Json glm4 = chatglm_json();
  glm4["rope_ratio"] = 500;
  EXPECT_EQ(map(glm4).rope.theta, 5e6);
  EXPECT_EQ(map(glm4).rope.type, RopeType::kDefault);
  // ChatGLM2-6B-32k reads rope_ratio as a position interpolation.
  Json c2 = chatglm_json();
  c2["rope_ratio"] = 16;
  m = map(c2, "chatglm2");
  EXPECT_EQ(m.family, "chatglm2");
  EXPECT_EQ(m.rope.theta, 10000.0);
  EXPECT_EQ(m.rope.type, RopeType::kLinear);
  EXPECT_EQ(m.rope.factor, 16.0);
  EXPECT_EQ(m.max_seq_len, 256);

  // Without multi_query_attention the fused rows are per head.
  Json mha = chatglm_json();
  mha["multi_query_attention"] = false;
  m = map(mha);
  EXPECT_EQ(m.head_num_kv, 4);
  EXPECT_TRUE(m.qkv_per_head_layout);
  WeightMap w = weights_of(mha);
  EXPECT_EQ(w[Slot::kQkv].transform, WeightTransform::kQkvPerHead);
  EXPECT_EQ(w[Slot::kQkvBias].transform, WeightTransform::kQkvPerHead);

  // LayerNorm variant maps the norm biases.
  Json ln = chatglm_json();
  ln["rmsnorm"] = false;
  EXPECT_EQ(map(ln).norm_type, NormType::kLayerNorm);
  EXPECT_TRUE(weights_of(ln).count(Slot::kAttnNormBias));
  EXPECT_TRUE(weights_of(ln).count(Slot::kFinalNormBias));
}

TEST(ChatGLM, UnsupportedVariantsAreRefusedByField) {
  for (const char* field : {"pre_seq_len", "quantization_bit", "add_bias_linear",
                            "apply_residual_connection_post_layernorm"}) {
    Json j = chatglm_json();
    if (std::string(field) == "pre_seq_len")
      j[field] = 128;
    else if (std::string(field) == "quantization_bit")
      j[field] = 4;
    else
      j[field] = true;
    expect_invalid([&] { map(j); }, {field});
  }
  Json bad = chatglm_json();
  bad["rope_ratio"] = -1;
  expect_invalid([&] { map(bad); }, {"rope_ratio"});
}

Json qwen_json() {
  return Json::parse(R"({"architectures": ["QWenLMHeadModel"], "model_type": "qwen",
    "hidden_size": 64, "intermediate_size": 352, "kv_channels": 16, "layer_norm_epsilon": 1e-6,
    "max_position_embeddings": 8192, "no_bias": true, "num_attention_heads": 4,
    "num_hidden_layers": 2, "rotary_emb_base": 10000, "rotary_pct": 1.0, "seq_length": 8192,
    "use_dynamic_ntk": true, "use_logn_attn": true, "vocab_size": 512})");
}

TEST(Qwen, FieldsNtkAndLogn) {
  ModelConfig m = map(qwen_json());
  EXPECT_EQ(m.family, "qwen");
  EXPECT_EQ(m.inter_size, 176);  // w1 and w2 are intermediate_size / 2 wide
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias);
  EXPECT_FALSE(m.mlp_bias);
  EXPECT_EQ(m.rope.type, RopeType::kQwenDynamic);
  EXPECT_EQ(m.rope.original_max_position, 8192);
  EXPECT_EQ(m.logn_scaling_len, 8192);
  EXPECT_EQ(m.max_seq_len, 32767);  // the log-n table's reach

  Json plain = qwen_json();
  plain["use_dynamic_ntk"] = false;
  plain["use_logn_attn"] = false;
  plain["no_bias"] = false;
  m = map(plain);
  EXPECT_EQ(m.rope.type, RopeType::kDefault);
  EXPECT_EQ(m.logn_scaling_len, 0);
  EXPECT_EQ(m.max_seq_len, 8192);
  EXPECT_TRUE(m.o_bias && m.mlp_bias);
  WeightMap w = weights_of(plain);
  EXPECT_EQ(w[Slot::kGate].name, "transformer.h.{L}.mlp.w2.weight");
  EXPECT_EQ(w[Slot::kUp].name, "transformer.h.{L}.mlp.w1.weight");
  EXPECT_TRUE(w.count(Slot::kOBias) && w.count(Slot::kDownBias));

  Json bad = qwen_json();
  bad["kv_channels"] = 32;
  expect_invalid([&] { map(bad); }, {"kv_channels"});
  bad = qwen_json();
  bad.erase("seq_length");
  expect_invalid([&] { map(bad); }, {"seq_length"});
  bad = qwen_json();
  bad["intermediate_size"] = 351;
  expect_invalid([&] { map(bad); }, {"intermediate_size"});
}

TEST(Qwen, DynamicNtkAlphaBucketsByPromptLength) {
  RopeConfig r;
  r.type = RopeType::kQwenDynamic;
  r.dim = 16;
  r.theta = 10000.0;
  r.original_max_position = 8;
  EXPECT_TRUE(rope_length_dependent(r));
  EXPECT_TRUE(rope_uses_prompt_length(r));
  // alpha = max(1, 2^ceil(log2(L / 8) + 1) - 1): 1 up to 8, 3 up to 16, 7 up to 32...
  auto expected_alpha = [](int64_t len) {
    if (len <= 8) return 1.0;
    if (len <= 16) return 3.0;
    if (len <= 32) return 7.0;
    return 15.0;
  };
  for (int64_t len : {1, 5, 8, 9, 12, 16, 17, 23, 32, 33, 64}) {
    const double base = 10000.0 * std::pow(expected_alpha(len), 16.0 / 14.0);
    RopeFrequencies f = rope_frequencies(r, len);
    ASSERT_EQ(f.inv_freq.size(), 8u);
    for (int32_t i = 0; i < 8; ++i)
      EXPECT_NEAR(f.inv_freq[i], 1.0 / std::pow(base, 2.0 * i / 16), 1e-12) << len << " " << i;
  }
  RopeConfig plain = r;
  plain.type = RopeType::kDynamic;
  EXPECT_FALSE(rope_uses_prompt_length(plain));
}

TEST(InternLM, BiasAndRotaryObject) {
  Json j = Json::parse(R"({"architectures": ["InternLMForCausalLM"], "model_type": "internlm",
    "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 512, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6, "rotary": {"base": 20000, "type": "origin"}})");
  ModelConfig m = map(j);
  EXPECT_EQ(m.family, "internlm");
  EXPECT_TRUE(m.qkv_bias && m.o_bias);  // `bias` defaults to true
  EXPECT_EQ(m.rope.theta, 20000.0);
  EXPECT_EQ(m.rope.type, RopeType::kDefault);
  EXPECT_TRUE(weights_of(j).count(Slot::kOBias));

  j["bias"] = false;
  j["rotary"] = {{"base", 10000}, {"type", "dynamic"}, {"scaling_factor", 2.0}};
  m = map(j);
  EXPECT_FALSE(m.qkv_bias || m.o_bias);
  EXPECT_EQ(m.rope.type, RopeType::kDynamic);
  EXPECT_EQ(m.rope.factor, 2.0);
  EXPECT_EQ(m.max_seq_len, 4096);
  j["rotary"] = {{"base", 10000}, {"type", "linear"}};
  expect_invalid([&] { map(j); }, {"rotary.type"});
}

TEST(InternLM2, PackedWqkvPerKeyValueHead) {
  Json j = Json::parse(R"({"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2",
    "bias": false, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1000000,
    "rope_scaling": {"type": "dynamic", "factor": 2.0}})");
  ModelConfig m = map(j);
  EXPECT_EQ(m.family, "internlm2");
  EXPECT_EQ(m.rope.theta, 1e6);
  EXPECT_EQ(m.rope.type, RopeType::kDynamic);
  WeightMap w = weights_of(j);
  EXPECT_EQ(w[Slot::kQkv].name, "model.layers.{L}.attention.wqkv.weight");
  EXPECT_EQ(w[Slot::kQkv].transform, WeightTransform::kQkvGrouped);
  EXPECT_EQ(w[Slot::kLmHead].name, "output.weight");
  EXPECT_FALSE(w.count(Slot::kQkvBias));
}

TEST(NormHead, RowsBecomeUnitLength) {
  Tensor t = Tensor::empty({3, 4}, DType::kF32);
  const float v[] = {3, 4, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
  std::copy(v, v + 12, t.data<float>());
  Tensor n = normalize_rows(t);
  const float want[] = {0.6f, 0.8f, 0, 0, 0, 0, 0, 0, 0.5f, 0.5f, 0.5f, 0.5f};
  for (int i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(n.data<float>()[i], want[i]) << i;  // zero row stays
  Tensor b = normalize_rows(t.to(DType::kBF16));
  EXPECT_EQ(b.dtype(), DType::kBF16);
  Tensor bf = b.to(DType::kF32);
  EXPECT_NEAR(bf.data<float>()[1], 0.8f, 4e-3);
}

TEST(LognScaling, DefaultBackendOpScalesOnlyQueries) {
  auto be = make_cpu_backend();
  QkvLayout layout{2, 1, 4};  // q 8 cols, k 4, v 4
  Tensor qkv = Tensor::empty({3, layout.row_cols()}, DType::kF32);
  for (int64_t i = 0; i < qkv.numel(); ++i) qkv.data<float>()[i] = static_cast<float>(i + 1);
  Tensor before = qkv.clone();
  const float f[] = {1.f, 2.f, 0.5f};
  Tensor factors = be->upload(f, {3}, DType::kF32, {});
  be->scale_queries(qkv, layout, factors);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t c = 0; c < layout.row_cols(); ++c) {
      const float want = before.data<float>()[t * 16 + c] * (c < 8 ? f[t] : 1.f);
      EXPECT_EQ(qkv.data<float>()[t * 16 + c], want) << t << " " << c;
    }
}

// ChatGLM without multi_query_attention stores query_key_value per head; loading it must
// give the same model as the same weights stored [q; k; v] (multi-query with one group
// per head).
TEST(ChatGLM, PerHeadQkvLayoutLoadsAsBlocks) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("tachyon_chatglm_" + std::to_string(::getpid()));
  const int64_t D = 32, H = 4, hd = 8, I = 48, V = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 0.3f);
  auto rnd = [&](Shape s) {
    Tensor t = Tensor::empty(s, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng);
    return t;
  };
  NamedTensors common;
  common.push_back({"transformer.embedding.word_embeddings.weight", rnd({V, D})});
  common.push_back({"transformer.encoder.final_layernorm.weight", rnd({D})});
  common.push_back({"transformer.output_layer.weight", rnd({V, D})});
  const std::string l = "transformer.encoder.layers.0.";
  common.push_back({l + "input_layernorm.weight", rnd({D})});
  common.push_back({l + "post_attention_layernorm.weight", rnd({D})});
  common.push_back({l + "self_attention.dense.weight", rnd({D, H * hd})});
  common.push_back({l + "mlp.dense_h_to_4h.weight", rnd({2 * I, D})});
  common.push_back({l + "mlp.dense_4h_to_h.weight", rnd({D, I})});
  Tensor blocks_w = rnd({3 * H * hd, D}), blocks_b = rnd({3 * H * hd});
  // Per-head rows: head h holds [q_h; k_h; v_h].
  Tensor per_head_w = Tensor::empty(blocks_w.shape(), DType::kF32);
  Tensor per_head_b = Tensor::empty(blocks_b.shape(), DType::kF32);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t r = 0; r < hd; ++r) {
        const int64_t src = (part * H + h) * hd + r, dst = (h * 3 + part) * hd + r;
        std::copy_n(blocks_w.data<float>() + src * D, D, per_head_w.data<float>() + dst * D);
        per_head_b.data<float>()[dst] = blocks_b.data<float>()[src];
      }
  Json cfg = chatglm_json();
  cfg["hidden_size"] = D;
  cfg["kv_channels"] = hd;
  cfg["num_attention_heads"] = H;
  cfg["num_layers"] = 1;
  cfg["ffn_hidden_size"] = I;
  cfg["padded_vocab_size"] = V;
  auto write = [&](const std::string& name, bool mq, const Tensor& w, const Tensor& b) {
    const fs::path dir = root / name;
    fs::create_directories(dir);
    Json c = cfg;
    c["multi_query_attention"] = mq;
    c["multi_query_group_num"] = H;
    std::ofstream(dir / "config.json") << c.dump();
    NamedTensors t = common;
    t.push_back({l + "self_attention.query_key_value.weight", w});
    t.push_back({l + "self_attention.query_key_value.bias", b});
    write_safetensors((dir / "model.safetensors").string(), t);
    return dir.string();
  };
  auto logits = [](const std::string& dir) {
    auto model = load_model(dir);
    model->init_kv_cache(4, 4);
    ForwardBatch b;
    b.token_ids = {5, 9, 2, 40, 17};
    b.positions = {0, 1, 2, 3, 4};
    b.query_start = {0, 5};
    b.context_lens = {5};
    b.block_tables = {1, 3};
    b.max_blocks_per_seq = 2;
    b.logits_rows = {0, 1, 2, 3, 4};
    return model->forward(b);
  };
  Tensor a = logits(write("per_head", false, per_head_w, per_head_b));
  Tensor c = logits(write("blocks", true, blocks_w, blocks_b));
  fs::remove_all(root);
  ASSERT_EQ(a.numel(), c.numel());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.data<float>()[i], c.data<float>()[i], 1e-5);
}

TEST(ForwardBatch, PromptLengthsAreValidated) {
  auto model = load_model(testing_util::fixture("qwen_ntk"));
  model->init_kv_cache(4, 4);
  ForwardBatch b;
  b.token_ids = {5, 9};
  b.positions = {0, 1};
  b.query_start = {0, 2};
  b.context_lens = {2};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.logits_rows = {1};
  b.prompt_lens = {2, 2};
  EXPECT_THROW(model->forward(b), InvalidArgument);
  b.prompt_lens = {0};
  EXPECT_THROW(model->forward(b), InvalidArgument);
  b.prompt_lens = {2};
  EXPECT_EQ(model->forward(b).numel(), model->vocab_size());
}

}  // namespace
}  // namespace tachyon
