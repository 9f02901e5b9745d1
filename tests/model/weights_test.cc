// Weight transforms and loading errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "conformance/fixture_dir.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/weights.h"

namespace tachyon {
namespace {

Tensor iota_rows(int64_t rows, int64_t cols, DType dtype) {
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < rows * cols; ++i) t.data<float>()[i] = static_cast<float>(i);
  return t.to(dtype);
}

float at(const Tensor& t, int64_t r, int64_t c) {
  return load_as_f32(t.raw(), t.dtype(), static_cast<size_t>(r * t.dim(1) + c));
}

TEST(WeightTransforms, Transpose) {
  Tensor t = iota_rows(3, 5, DType::kBF16);
  Tensor u = transpose_2d(t);
  ASSERT_EQ(u.shape(), (Shape{5, 3}));
  EXPECT_EQ(u.dtype(), DType::kBF16);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(at(u, c, r), at(t, r, c));
}

TEST(WeightTransforms, QkvPerHeadToBlocks) {
  const int heads = 3, hd = 2;
  Tensor t = iota_rows(3 * heads * hd, 4, DType::kF32);  // rows [head][q,k,v][hd]
  Tensor u = reorder_qkv_per_head(t, heads, hd);
  for (int part = 0; part < 3; ++part)
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < hd; ++d)
        for (int c = 0; c < 4; ++c)
          EXPECT_EQ(at(u, (part * heads + h) * hd + d, c), at(t, (h * 3 + part) * hd + d, c));
  // Biases (1-d) too.
  Tensor b = iota_rows(1, 18, DType::kF32).reshape({18});
  Tensor ub = reorder_qkv_per_head(b, heads, hd);
  EXPECT_EQ(ub.data<float>()[2], 6.f);  // q of head 1 came from rows 6..7
}

TEST(WeightTransforms, QkvGroupedToBlocks) {
  const int kv = 2, group = 3, hd = 2;
  Tensor t = iota_rows(kv * (group + 2) * hd, 3, DType::kF16);
  Tensor u = reorder_qkv_grouped(t, kv, group, hd);
  for (int g = 0; g < kv; ++g) {
    for (int q = 0; q < group; ++q)
      for (int d = 0; d < hd; ++d)
        EXPECT_EQ(at(u, (g * group + q) * hd + d, 0), at(t, (g * (group + 2) + q) * hd + d, 0));
    for (int d = 0; d < hd; ++d) {
      EXPECT_EQ(at(u, kv * group * hd + g * hd + d, 1),
                at(t, (g * (group + 2) + group) * hd + d, 1));
      EXPECT_EQ(at(u, (kv * group + kv) * hd + g * hd + d, 2),
                at(t, (g * (group + 2) + group + 1) * hd + d, 2));
    }
  }
}

class LoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon_load_errors_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write_config(const std::string& text) { std::ofstream(dir_ / "config.json") << text; }
  std::filesystem::path dir_;
};

const char* kTinyLlama = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8,
  "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
  "max_position_embeddings": 32, "tie_word_embeddings": true})";

NamedTensors tiny_llama_tensors() {
  auto w = [](int64_t r, int64_t c) { return iota_rows(r, c, DType::kF32); };
  auto v = [](int64_t n) { return Tensor::zeros({n}, DType::kF32); };
  return {{"model.embed_tokens.weight", w(10, 8)},
          {"model.layers.0.input_layernorm.weight", v(8)},
          {"model.layers.0.self_attn.q_proj.weight", w(8, 8)},
          {"model.layers.0.self_attn.k_proj.weight", w(8, 8)},
          {"model.layers.0.self_attn.v_proj.weight", w(8, 8)},
          {"model.layers.0.self_attn.o_proj.weight", w(8, 8)},
          {"model.layers.0.post_attention_layernorm.weight", v(8)},
          {"model.layers.0.mlp.gate_proj.weight", w(16, 8)},
          {"model.layers.0.mlp.up_proj.weight", w(16, 8)},
          {"model.layers.0.mlp.down_proj.weight", w(8, 16)},
          {"model.norm.weight", v(8)}};
}

TEST_F(LoadErrors, MissingConfigAndWeights) {
  EXPECT_THROW(load_model(dir_.string()), NotFound);
  write_config(kTinyLlama);
  EXPECT_THROW(load_model(dir_.string()), NotFound);
}

TEST_F(LoadErrors, LoadsTiedAndZeroCopy) {
  write_config(kTinyLlama);
  write_safetensors((dir_ / "model.safetensors").string(), tiny_llama_tensors());
  auto m = load_model(dir_.string());
  const ModelWeights& w = m->weights();
  EXPECT_TRUE(w.tied_lm_head);
  // One table, unless the backend keeps its own copy of linear weights.
  if (!m->backend().repacks_linear_weights()) {
    EXPECT_EQ(w.lm_head.w.raw(), w.embedding.raw());
  }
  EXPECT_GT(m->weights().records.size(), 10u);
}

TEST_F(LoadErrors, MissingTensorAndWrongShapeAreNamed) {
  write_config(kTinyLlama);
  NamedTensors t = tiny_llama_tensors();
  t.erase(t.begin() + 3);  // k_proj
  write_safetensors((dir_ / "model.safetensors").string(), t);
  try {
    load_model(dir_.string());
    ADD_FAILURE();
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.k_proj.weight"),
              std::string::npos);
  }
  t = tiny_llama_tensors();
  t[8].second = iota_rows(15, 8, DType::kF32);  // up_proj rows != intermediate_size
  write_safetensors((dir_ / "model.safetensors").string(), t);
  try {
    load_model(dir_.string());
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("up_proj"), std::string::npos) << e.what();
  }
}

TEST_F(LoadErrors, BadBatchesAreRefused) {
  write_config(kTinyLlama);
  write_safetensors((dir_ / "model.safetensors").string(), tiny_llama_tensors());
  auto m = load_model(dir_.string());
  ForwardBatch b;
  b.token_ids = {1, 2};
  b.positions = {0, 1};
  b.query_start = {0, 2};
  b.context_lens = {2};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.logits_rows = {1};
  EXPECT_THROW(m->forward(b), InvalidArgument);  // no cache yet
  m->init_kv_cache(4, 4);
  EXPECT_EQ(m->forward(b).shape(), (Shape{1, 10}));
  ForwardBatch bad = b;
  bad.token_ids[0] = 10;
  EXPECT_THROW(m->forward(bad), InvalidArgument);
  bad = b;
  bad.block_tables = {4};
  EXPECT_THROW(m->forward(bad), InvalidArgument);
  bad = b;
  bad.context_lens = {1};
  EXPECT_THROW(m->forward(bad), InvalidArgument);
  bad = b;
  bad.logits_rows = {2};
  EXPECT_THROW(m->forward(bad), InvalidArgument);
  bad = b;
  bad.query_start = {0, 3};
  EXPECT_THROW(m->forward(bad), InvalidArgument);
  EXPECT_THROW(m->copy_kv_blocks({{0, 9}}), InvalidArgument);
}

}  // namespace
}  // namespace tachyon

namespace tachyon {
namespace {

// The Mixtral fixture rewritten in the transformers 5 layout (router under mlp.gate,
// experts stacked in mlp.experts.gate_up_proj [E, 2I, D] and down_proj [E, D, I])
// gives the same logits as the hub layout.
TEST(StackedExperts, SameLogitsAsPerExpertTensors) {
  namespace fs = std::filesystem;
  const fs::path src = testing_util::fixture("mixtral");
  const fs::path dst =
      fs::temp_directory_path() / ("tachyon_stacked_" + std::to_string(::getpid()));
  fs::create_directories(dst);
  fs::copy_file(src / "config.json", dst / "config.json", fs::copy_options::overwrite_existing);
  auto ckpt = SafetensorsFile::open((src / "model.safetensors").string());
  NamedTensors out;
  const int E = 4, I = 176, D = 64;
  for (const auto& e : ckpt->entries()) {
    if (e.name.find("block_sparse_moe") == std::string::npos)
      out.emplace_back(e.name, ckpt->get(e.name));
  }
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.emplace_back(p + "mlp.gate.weight", ckpt->get(p + "block_sparse_moe.gate.weight"));
    Tensor gu = Tensor::empty({E, 2 * I, D}, DType::kF32),
           dn = Tensor::empty({E, D, I}, DType::kF32);
    for (int e = 0; e < E; ++e) {
      const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      std::memcpy(gu.data<float>() + e * 2 * I * D, ckpt->get(x + "w1.weight").raw(), I * D * 4);
      std::memcpy(gu.data<float>() + e * 2 * I * D + I * D, ckpt->get(x + "w3.weight").raw(),
                  I * D * 4);
      std::memcpy(dn.data<float>() + e * D * I, ckpt->get(x + "w2.weight").raw(), D * I * 4);
    }
    out.emplace_back(p + "mlp.experts.gate_up_proj", gu);
    out.emplace_back(p + "mlp.experts.down_proj", dn);
  }
  write_safetensors((dst / "model.safetensors").string(), out);
  auto run = [](const std::string& dir) {
    auto m = load_model(dir);
    m->init_kv_cache(4, 8);
    ForwardBatch b;
    b.token_ids = {5, 77, 300, 12, 9, 41};
    b.positions = {0, 1, 2, 3, 4, 5};
    b.query_start = {0, 6};
    b.context_lens = {6};
    b.block_tables = {2};
    b.max_blocks_per_seq = 1;
    b.logits_rows = {0, 3, 5};
    return m->forward(b);
  };
  Tensor a = run(src.string()), b = run(dst.string());
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_FLOAT_EQ(a.data<float>()[i], b.data<float>()[i]);
  fs::remove_all(dst);
}

}  // namespace
}  // namespace tachyon

namespace tachyon {
namespace {

// f16 and bf16 checkpoints compute exactly what an f32 checkpoint holding the same
// (rounded) values computes: weights are converted exactly inside the kernels.
TEST(CheckpointDtypes, HalfPrecisionWeightsConvertExactly) {
  namespace fs = std::filesystem;
  const fs::path src = testing_util::fixture("qwen3");
  auto ckpt = SafetensorsFile::open((src / "model.safetensors").string());
  auto run = [](const std::string& dir) {
    auto m = load_model(dir);
    m->init_kv_cache(4, 8);
    ForwardBatch b;
    b.token_ids = {5, 77, 300, 12, 9, 41, 7};
    b.positions = {0, 1, 2, 3, 4, 5, 6};
    b.query_start = {0, 7};
    b.context_lens = {7};
    b.block_tables = {1};
    b.max_blocks_per_seq = 1;
    b.logits_rows = {0, 6};
    return m->forward(b);
  };
  for (DType half : {DType::kF16, DType::kBF16}) {
    const fs::path dh = fs::temp_directory_path() / ("tachyon_half_" + std::to_string(::getpid()));
    const fs::path df =
        fs::temp_directory_path() / ("tachyon_rounded_" + std::to_string(::getpid()));
    NamedTensors th, tf;
    for (const auto& e : ckpt->entries()) {
      Tensor h = ckpt->get(e.name).to(half);
      th.emplace_back(e.name, h);
      tf.emplace_back(e.name, h.to(DType::kF32));
    }
    for (const auto& [d, t] : {std::pair{dh, &th}, std::pair{df, &tf}}) {
      fs::create_directories(d);
      fs::copy_file(src / "config.json", d / "config.json", fs::copy_options::overwrite_existing);
      write_safetensors((d / "model.safetensors").string(), *t);
    }
    Tensor a = run(dh.string()), b = run(df.string());
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i)
      EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-5) << i;
    fs::remove_all(dh);
    fs::remove_all(df);
  }
}

}  // namespace
}  // namespace tachyon
