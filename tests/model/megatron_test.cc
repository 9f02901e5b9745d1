// Megatron-LM checkpoints (model/megatron.h): the fixtures of
// scripts/make_megatron_fixtures.py (a GPT-2-like and a Llama-like model, each split
// 2 x 2 over tensor and pipeline ranks, in the legacy and the Megatron-core names)
// against the Hugging Face models they were written from, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/json.h"
#include "io/torch_file.h"
#include "model/loader.h"
#include "model/megatron.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;

std::string fixtures() {
  return std::string(TACHYON_SOURCE_DIR) + "/tests/model/fixtures/megatron";
}

struct Reference {
  std::vector<int32_t> prompt, greedy;
  std::vector<std::vector<float>> logits;
  int64_t vocab = 0;
};

Reference reference(const std::string& model) {
  Json j = load_json_file(fixtures() + "/" + model + ".reference.json");
  Reference r;
  r.prompt = j["prompt"].get<std::vector<int32_t>>();
  r.greedy = j["greedy_new_ids"].get<std::vector<int32_t>>();
  r.logits = j["logits"].get<std::vector<std::vector<float>>>();
  r.vocab = j["vocab_size"].get<int64_t>();
  return r;
}

void check_against_reference(const std::string& name, const std::string& model) {
  SCOPED_TRACE(name);
  const Reference ref = reference(model);
  LoadOptions opts;
  opts.device = Device{};
  opts.vocab_size = ref.vocab;
  auto m = load_model(fixtures() + "/" + name, opts);
  ASSERT_EQ(m->vocab_size(), ref.vocab);
  const int32_t block = 4;
  m->init_kv_cache(16, block);
  // Prefill: the logits of every prompt position.
  ForwardBatch b = testing_util::next_step(ref.prompt, 0, block, 16);
  b.logits_rows.resize(ref.prompt.size());
  for (size_t i = 0; i < ref.prompt.size(); ++i) b.logits_rows[i] = static_cast<int32_t>(i);
  Tensor logits = m->forward(b);
  ASSERT_EQ(logits.dim(0), static_cast<int64_t>(ref.prompt.size()));
  float worst = 0;
  for (size_t t = 0; t < ref.prompt.size(); ++t)
    for (int64_t v = 0; v < ref.vocab; ++v)
      worst = std::max(worst, std::abs(logits.data<float>()[t * ref.vocab + v] - ref.logits[t][v]));
  EXPECT_LT(worst, 1e-3f) << "worst " << worst;
  // Greedy decoding, one token per step through the cache.
  std::vector<int32_t> tokens = ref.prompt, got;
  int32_t computed = static_cast<int32_t>(tokens.size());
  const float* last = logits.data<float>() + (ref.prompt.size() - 1) * ref.vocab;
  for (;;) {
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + ref.vocab) - last);
    got.push_back(next);
    if (got.size() == ref.greedy.size()) break;
    tokens.push_back(next);
    const ForwardBatch step = testing_util::next_step(tokens, computed, block, 16);
    computed = static_cast<int32_t>(tokens.size());
    logits = m->forward(step);
    last = logits.data<float>();
  }
  EXPECT_EQ(got, ref.greedy);
}

TEST(Megatron, GptLegacyMatchesTransformers) {
  check_against_reference("gpt_legacy", "gpt");
}
TEST(Megatron, GptCoreMatchesTransformers) {
  check_against_reference("gpt_core", "gpt");
}
TEST(Megatron, LlamaLegacyMatchesTransformers) {
  check_against_reference("llama_legacy", "llama");
}
TEST(Megatron, LlamaCoreMatchesTransformers) {
  check_against_reference("llama_core", "llama");
}

TEST(Megatron, RecognisesRunAndIterationFolders) {
  EXPECT_TRUE(is_megatron_checkpoint(fixtures() + "/gpt_legacy"));
  EXPECT_TRUE(is_megatron_checkpoint(fixtures() + "/gpt_legacy/iter_0000100"));
  EXPECT_TRUE(is_megatron_checkpoint(fixtures() + "/llama_core"));
  EXPECT_FALSE(is_megatron_checkpoint(fixtures()));
  EXPECT_FALSE(is_megatron_checkpoint(std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat"));
  const MegatronLayout l = find_megatron_layout(fixtures() + "/gpt_core");
  EXPECT_EQ(fs::path(l.dir).filename(), "release");
  ASSERT_EQ(l.shards.size(), 4u);
  EXPECT_TRUE(l.pipeline_named);
  EXPECT_EQ(l.shards[3].tp, 1);
  EXPECT_EQ(l.shards[3].pp, 1);
}

TEST(Megatron, ArgsMapOntoTheConfig) {
  ModelConfig g = load_megatron_config(fixtures() + "/gpt_legacy");
  EXPECT_EQ(g.norm_type, NormType::kLayerNorm);
  EXPECT_EQ(g.position, PositionType::kLearned);
  EXPECT_EQ(g.activation, Activation::kGelu);
  EXPECT_FALSE(g.gated_mlp);
  EXPECT_TRUE(g.qkv_bias && g.o_bias && g.mlp_bias && g.tie_word_embeddings);
  EXPECT_EQ(g.vocab_size, 128);  // padded, no tokenizer size given
  EXPECT_EQ(g.dtype, DType::kBF16);
  ModelConfig l = load_megatron_config(fixtures() + "/llama_core", 120);
  EXPECT_EQ(l.norm_type, NormType::kRMSNorm);
  EXPECT_EQ(l.position, PositionType::kRotary);
  EXPECT_EQ(l.rope.dim, 8);
  EXPECT_EQ(l.head_num, 4);
  EXPECT_EQ(l.head_num_kv, 2);
  EXPECT_TRUE(l.gated_mlp);
  EXPECT_FALSE(l.qkv_bias || l.tie_word_embeddings);
  EXPECT_EQ(l.vocab_size, 120);
  EXPECT_EQ(l.layer_num, 4);
  testing_util::expect_invalid([] { load_megatron_config(fixtures() + "/llama_core", 129); },
                               "exceed the padded vocabulary of 128");
}

TEST(Megatron, ArgsAreReadAsData) {
  auto f =
      TorchFile::open_object(fixtures() + "/gpt_core/release/mp_rank_00_000/model_optim_rng.pt");
  const PyValue& root = *f->root();
  const PyValue* args = root.get("args");
  ASSERT_TRUE(args);
  EXPECT_EQ(args->s, "argparse.Namespace");
  EXPECT_EQ(args->attr("params_dtype")->kind, PyValue::Kind::kGlobal);
  EXPECT_EQ(args->attr("params_dtype")->s, "torch.bfloat16");
  const PyValue* mt = args->attr("model_type");
  ASSERT_TRUE(mt);
  EXPECT_EQ(mt->kind, PyValue::Kind::kObject);
  EXPECT_EQ(mt->s, "megatron.core.enums.ModelType");
  EXPECT_EQ(root.get("checkpoint_version")->f, 3.0);
  // The numpy RNG state: an opaque ndarray reconstruction, its dtype and bytes as data.
  const PyValue* rng = root.get("rng_state");
  ASSERT_TRUE(rng && rng->kind == PyValue::Kind::kList && !rng->items.empty());
  const PyValue* np = rng->items[0]->get("np_rng_state");
  ASSERT_TRUE(np && np->kind == PyValue::Kind::kTuple && np->items.size() == 5);
  EXPECT_EQ(np->items[0]->s, "MT19937");
  EXPECT_EQ(np->items[1]->kind, PyValue::Kind::kObject);
  EXPECT_NE(np->items[1]->s.find("_reconstruct"), std::string::npos);
  // Tensors are named by path, the RNG state's among them.
  EXPECT_TRUE(f->find("rng_state.0.torch_rng_state"));
  EXPECT_TRUE(f->find("model.embedding.word_embeddings.weight"));
}

// A copy of fixture `name` in a fresh temporary folder.
fs::path copy_fixture(const std::string& name, const std::string& tag) {
  const fs::path dst =
      fs::temp_directory_path() / ("tachyon-megatron-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::copy(fixtures() + "/" + name, dst, fs::copy_options::recursive);
  return dst;
}

// A release folder holding one shard (`file`) as mp_rank_00_000.
fs::path single_shard(const std::string& file, const std::string& tag) {
  const fs::path dst =
      fs::temp_directory_path() / ("tachyon-megatron-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::create_directories(dst / "mp_rank_00_000");
  fs::copy_file(fixtures() + "/hostile/" + file, dst / "mp_rank_00_000/model_optim_rng.pt");
  return dst;
}

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Megatron, RefusesCallsWhereDataBelongs) {
  LoadOptions opts;
  opts.device = Device{};
  for (const char* file : {"reduce_in_args.pt", "reduce_as_model.pt"}) {
    const fs::path dir = single_shard(file, "evil");
    const std::string msg = message_of<InvalidArgument>([&] { load_model(dir.string(), opts); });
    EXPECT_NE(msg.find("model_optim_rng.pt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("posix.system"), std::string::npos) << msg;
    fs::remove_all(dir);
  }
}

TEST(Megatron, RefusesANamespaceWithoutRequiredArgs) {
  const fs::path dir = single_shard("no_hidden_size.pt", "noarg");
  const std::string msg = message_of<InvalidArgument>([&] { load_megatron_config(dir.string()); });
  EXPECT_NE(msg.find("model_optim_rng.pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hidden_size"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Megatron, RefusesAMissingShard) {
  const fs::path dir = copy_fixture("llama_legacy", "missing");
  fs::remove_all(dir / "iter_0000100/mp_rank_01_001");
  const std::string msg = message_of<NotFound>([&] { load_megatron(dir.string()); });
  EXPECT_NE(msg.find("mp_rank_01_001"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Megatron, RefusesShardsOfMismatchedShapes) {
  const fs::path dir = copy_fixture("gpt_core", "shape");
  fs::copy_file(fixtures() + "/hostile/bad_fc1_mp_rank_01_001.pt",
                dir / "release/mp_rank_01_001/model_optim_rng.pt",
                fs::copy_options::overwrite_existing);
  const std::string msg = message_of<InvalidArgument>([&] { load_megatron(dir.string()); });
  EXPECT_NE(msg.find("mp_rank_01_001/model_optim_rng.pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("linear_fc1.weight"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Megatron, OlderQkvOrdersBecomeVersionTwo) {
  // 2 heads of 2 dims, one column: row value = its version-2 index [h][w][d].
  const int32_t heads = 2, hd = 2;
  auto make = [&](auto index_of) {
    Tensor t = Tensor::empty({12, 1}, DType::kF32);
    for (int h = 0; h < heads; ++h)
      for (int w = 0; w < 3; ++w)
        for (int d = 0; d < hd; ++d)
          t.data<float>()[index_of(h, w, d)] = static_cast<float>((h * 3 + w) * hd + d);
    return t;
  };
  const Tensor v0 = make([&](int h, int w, int d) { return (w * heads + h) * hd + d; });
  const Tensor v1 = make([&](int h, int w, int d) { return (h * hd + d) * 3 + w; });
  for (const auto& [t, version] : {std::pair{v0, 0.0}, std::pair{v1, 1.0}}) {
    const Tensor out = megatron_qkv_to_v2(t, version, heads, hd);
    for (int r = 0; r < 12; ++r) EXPECT_EQ(out.data<float>()[r], r) << "version " << version;
  }
}

}  // namespace
}  // namespace tachyon
