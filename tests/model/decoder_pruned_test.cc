// Layers of their own shapes (a pruned model: ModelConfig's per-layer heads, KV heads
// and intermediate sizes, a layer's attention or MLP absent). A pruned model must give
// the logits of the full model with the pruned parts' outputs zeroed: the o columns of
// the removed heads, the down columns of the removed neurons, the whole o or down of an
// absent block. Its KV cache holds only its layers' KV heads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "model/model_test_util.h"
#include "model/random_model.h"
#include "model/registry.h"
#include "model/weights.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;
using testing_util::expect_invalid;
using testing_util::fixture;
using testing_util::fixture_source_dir;
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
  std::unique_ptr<Model> pruned, masked;
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

// The query heads of the KV heads a layer keeps (each KV head's group).
std::vector<int32_t> query_heads(const LayerCut& cut, int32_t group) {
  std::vector<int32_t> q;
  for (int32_t kv : cut.kv_heads)
    for (int32_t g = 0; g < group; ++g) q.push_back(kv * group + g);
  return q;
}

// The llama fixture cut per `cuts` as a checkpoint folder: each layer's q/k/v/o and
// gate/up/down at its own shape, an absent block's tensors (and its norm) left out.
// `config` is written as its config.json.
void write_pruned_checkpoint(const std::vector<LayerCut>& cuts, const Json& config,
                             const fs::path& out) {
  const std::string dir = fixture("llama");
  auto ckpt = Checkpoint::open(dir);
  const int32_t group = 2, hd = 16;  // the fixture's 4 heads over 2 KV heads of 16 dims
  NamedTensors tensors;
  for (const std::string& name : ckpt->names()) {
    const std::string prefix = "model.layers.";
    if (name.rfind(prefix, 0) != 0) {
      tensors.emplace_back(name, ckpt->get(name));
      continue;
    }
    const size_t dot = name.find('.', prefix.size());
    const int l = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
    const std::string rest = name.substr(dot + 1);
    const LayerCut& cut = cuts.at(static_cast<size_t>(l));
    const std::vector<int64_t> q_cols = spans(query_heads(cut, group), hd),
                               kv_rows = spans(cut.kv_heads, hd);
    const bool attn = !cut.kv_heads.empty(), mlp = !cut.neurons.empty();
    const Tensor t = ckpt->get(name);
    if (rest.rfind("self_attn.", 0) == 0 || rest == "input_layernorm.weight") {
      if (!attn) continue;
      if (rest == "self_attn.q_proj.weight") {
        tensors.emplace_back(name, take(t, q_cols, false));
      } else if (rest == "self_attn.k_proj.weight" || rest == "self_attn.v_proj.weight") {
        tensors.emplace_back(name, take(t, kv_rows, false));
      } else if (rest == "self_attn.o_proj.weight") {
        tensors.emplace_back(name, take(t, q_cols, true));
      } else {
        tensors.emplace_back(name, t);
      }
    } else if (rest.rfind("mlp.", 0) == 0 || rest == "post_attention_layernorm.weight") {
      if (!mlp) continue;
      if (rest == "mlp.gate_proj.weight" || rest == "mlp.up_proj.weight") {
        tensors.emplace_back(name, take(t, cut.neurons, false));
      } else if (rest == "mlp.down_proj.weight") {
        tensors.emplace_back(name, take(t, cut.neurons, true));
      } else {
        tensors.emplace_back(name, t);
      }
    } else {
      tensors.emplace_back(name, t);
    }
  }
  fs::create_directories(out);
  write_safetensors((out / "model.safetensors").string(), tensors);
  std::ofstream(out / "config.json") << config.dump(2);
}

Json llama_config() {
  return load_json_file(fixture_source_dir("llama") + "/config.json");
}

// RTP-LLM's lists of a cut: heads, KV heads and intermediate sizes per layer.
void add_lists(Json& j, const std::vector<LayerCut>& cuts, bool with_kv) {
  Json heads = Json::array(), kv = Json::array(), inter = Json::array();
  for (const LayerCut& c : cuts) {
    heads.push_back(static_cast<int64_t>(c.kv_heads.size()) * 2);
    kv.push_back(static_cast<int64_t>(c.kv_heads.size()));
    inter.push_back(static_cast<int64_t>(c.neurons.size()));
  }
  j["layer_head_num"] = heads;
  if (with_kv) j["layer_head_num_kv"] = kv;
  j["layer_inter_size"] = inter;
}

struct TempDir {
  fs::path path =
      fs::temp_directory_path() / ("tachyon_pruned_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ~TempDir() { fs::remove_all(path); }
};

LoadOptions on_cpu() {
  LoadOptions o;
  o.device = Device{};
  return o;
}

std::vector<int64_t> hundred_neurons() {
  std::vector<int64_t> neurons;
  for (int64_t i = 0; i < 176 && neurons.size() < 100; ++i)
    if (i % 3 != 1) neurons.push_back(i);
  return neurons;
}

// A pruned checkpoint whose config.json carries the three lists loads at its per-layer
// shapes and computes what the full model with the cut parts zeroed does.
TEST(PrunedCheckpoint, ListsInConfigJson) {
  const std::vector<LayerCut> cuts = {LayerCut{{1}, hundred_neurons()}, LayerCut{{}, first(176)}};
  TempDir tmp;
  Json cfg = llama_config();
  add_lists(cfg, cuts, true);
  write_pruned_checkpoint(cuts, cfg, tmp.path);
  std::unique_ptr<Checkpoint> ckpt;
  Models m = build(cuts, ckpt);
  m.pruned = load_model(tmp.path.string(), on_cpu());
  const ModelConfig& mc = dynamic_cast<ModelRunner&>(*m.pruned).config();
  EXPECT_EQ(mc.layer_head_num, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(mc.layer_inter_size, (std::vector<int64_t>{100, 176}));
  EXPECT_EQ(m.pruned->kv_bytes_per_block(4), size_t{1 * 16 * 2 * 4 * 4});
  expect_same_logits(m);
}

// The lists in a separate file (SPARSE_CONFIG_FILE / --sparse-config), config.json
// plain; without layer_head_num_kv a layer of this grouped model keeps its 2 KV heads.
TEST(PrunedCheckpoint, ListsInSparseConfigFile) {
  const std::vector<LayerCut> cuts = {LayerCut{{0, 1}, first(176)},
                                      LayerCut{{}, {3, 17, 40, 41, 99, 100, 150, 175}}};
  TempDir tmp;
  write_pruned_checkpoint(cuts, llama_config(), tmp.path / "model");
  Json sparse = Json::object();
  add_lists(sparse, cuts, false);
  sparse["layer_num"] = 2;
  std::ofstream(tmp.path / "sparse.json") << sparse.dump();
  LoadOptions o = on_cpu();
  // Without the file, config.json's full shapes contradict the cut tensors (layer 1's
  // attention is absent).
  EXPECT_THROW(load_model((tmp.path / "model").string(), o), Error);
  o.sparse_config = (tmp.path / "sparse.json").string();
  std::unique_ptr<Checkpoint> ckpt;
  Models m = build(cuts, ckpt);
  m.pruned = load_model((tmp.path / "model").string(), o);
  EXPECT_EQ(dynamic_cast<ModelRunner&>(*m.pruned).config().kv_heads(0), 2);
  expect_same_logits(m);
}

// The random-model writer (tachyon make-random) writes each layer at its listed shape and
// leaves an absent block's tensors out; the result loads.
TEST(PrunedCheckpoint, RandomWriterFollowsTheLists) {
  TempDir tmp;
  fs::create_directories(tmp.path);
  Json cfg = llama_config();
  cfg["layer_head_num"] = Json::array({2, 0});
  cfg["layer_head_num_kv"] = Json::array({1, 0});
  cfg["layer_inter_size"] = Json::array({100, 0});
  std::ofstream(tmp.path / "in.json") << cfg.dump();
  RandomModelOptions opts;
  opts.dtype = DType::kF32;
  write_random_model((tmp.path / "in.json").string(), (tmp.path / "out").string(), opts);
  auto ckpt = Checkpoint::open((tmp.path / "out").string());
  EXPECT_EQ(ckpt->info("model.layers.0.self_attn.q_proj.weight").shape, (Shape{32, 64}));
  EXPECT_EQ(ckpt->info("model.layers.0.self_attn.k_proj.weight").shape, (Shape{16, 64}));
  EXPECT_EQ(ckpt->info("model.layers.0.self_attn.o_proj.weight").shape, (Shape{64, 32}));
  EXPECT_EQ(ckpt->info("model.layers.0.mlp.down_proj.weight").shape, (Shape{64, 100}));
  EXPECT_FALSE(ckpt->contains("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_FALSE(ckpt->contains("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_FALSE(ckpt->contains("model.layers.1.input_layernorm.weight"));
  auto model = load_model((tmp.path / "out").string(), on_cpu());
  model->init_kv_cache(4, 4);
  const Tensor logits = model->forward(testing_util::one_seq({5, 9, 200}, 0, {0}));
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_TRUE(std::isfinite(logits.data<float>()[i]));
}

// A tensor whose shape contradicts the lists is refused, naming it.
TEST(PrunedCheckpoint, ShapeContradictingTheListsIsRefused) {
  const std::vector<LayerCut> cuts = {LayerCut{{1}, hundred_neurons()},
                                      LayerCut{{0, 1}, first(176)}};
  TempDir tmp;
  Json cfg = llama_config();
  add_lists(cfg, cuts, true);
  cfg["layer_inter_size"] = Json::array({120, 176});
  write_pruned_checkpoint(cuts, cfg, tmp.path);
  expect_invalid([&] { load_model(tmp.path.string(), on_cpu()); },
                 {"model.layers.0.mlp.", "[100, 64]"});
  cfg["layer_inter_size"] = Json::array({100, 176});
  cfg["layer_head_num"] = Json::array({4, 4});
  cfg["layer_head_num_kv"] = Json::array({2, 2});
  std::ofstream(tmp.path / "config.json") << cfg.dump(2);
  expect_invalid([&] { load_model(tmp.path.string(), on_cpu()); },
                 {"model.layers.0.self_attn.", "shape"});
}

// Lists that are not a model's: each a clear error naming the file and the field or layer.
TEST(PrunedCheckpoint, BadListsAreRefused) {
  auto with = [](const char* field, Json v) {
    Json j = llama_config();
    j[field] = std::move(v);
    return j;
  };
  auto map = [](const Json& j) { return testing_util::map(j); };
  expect_invalid([&] { map(with("layer_head_num", Json::array({4}))); },
                 {"config.json", "layer_head_num", "1 entries", "2 layers"});
  expect_invalid(
      [&] {
        map(with("layer_inter_size", Json::array({176, -5})));
      },
      {"layer_inter_size", "layer 1", "non-negative"});
  expect_invalid(
      [&] {
        map(with("layer_inter_size", Json::array({176, 1.5})));
      },
      {"layer_inter_size", "1.5"});
  expect_invalid([&] { map(with("layer_head_num", Json(4))); }, {"layer_head_num", "list"});
  Json j = with("layer_head_num", Json::array({3, 4}));
  j["layer_head_num_kv"] = Json::array({2, 2});
  expect_invalid([&] { map(j); }, {"layer 0", "3 heads", "2 KV heads"});
  j["layer_head_num"] = Json::array({0, 4});
  j["layer_head_num_kv"] = Json::array({1, 2});
  expect_invalid([&] { map(j); }, {"layer 0", "0 heads"});
  j = with("layer_head_num", Json::array({0, 0}));
  expect_invalid([&] { map(j); }, "no layer has attention");
  // A sparse config file: its layer_num must be the model's, and it must name a list.
  TempDir tmp;
  fs::create_directories(tmp.path);
  const std::string file = (tmp.path / "sparse.json").string();
  const HfConfig hf(llama_config(), "config.json");
  std::ofstream(file) << R"({"layer_num": 3, "layer_head_num": [4, 4, 4]})";
  expect_invalid([&] { map_model_config(hf, "", "", "", file); }, {"sparse.json", "layer_num 3"});
  std::ofstream(file) << R"({"layer_num": 2})";
  expect_invalid([&] { map_model_config(hf, "", "", "", file); }, {"sparse.json", "none of"});
  EXPECT_THROW(map_model_config(hf, "", "", "", file + ".missing"), NotFound);
}

}  // namespace
}  // namespace tachyon
