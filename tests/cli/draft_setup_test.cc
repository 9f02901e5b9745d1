// The draft model's settings (--draft-model / SP_CHECKPOINT_PATH, --draft-model-type /
// SP_MODEL_TYPE, --draft-dtype / SP_WEIGHT_TYPE, --num-speculative-tokens /
// GEN_NUM_PER_CIRCLE), its vocabulary checks against the model and its proposer built
// over models/tiny-kjv-chat with models/tiny-kjv-draft (cli/draft_setup.h).
#include "cli/draft_setup.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/fake_env.h"
#include "core/json.h"
#include "core/mmap.h"
#include "engine/draft_model_proposer.h"

namespace tachyon::cli {
namespace {

namespace fs = std::filesystem;
using Env = ::tachyon::testing::FakeEnv;

const std::string kRoot = TACHYON_SOURCE_DIR;
const std::string kTarget = kRoot + "/models/tiny-kjv-chat";
const std::string kDraft = std::string(TACHYON_BINARY_DIR) + "/models/tiny-kjv-draft";

SettingValues settings(const std::vector<std::string>& args, const Env& env = {}) {
  auto v = parse_settings("generate", args, env.fn());
  EXPECT_TRUE(v.has_value());
  return *v;
}

// The draft options and proposer of the settings, through their speculative options.
std::optional<DraftOptions> draft_of(const SettingValues& v) {
  return draft_options(v, speculative_options(v));
}
std::shared_ptr<Proposer> proposer_of(const SettingValues& v, const std::string& target_dir,
                                      Model& target, const LoadOptions& opts, EngineConfig* c) {
  return make_draft_proposer(v, speculative_options(v), target_dir, target, opts, c);
}

// The message of the InvalidArgument that `f` throws ("" when none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& msg, std::initializer_list<const char*> needles) {
  EXPECT_FALSE(msg.empty());
  for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
}

// A copy of the draft's folder (weights linked) whose files `edit` may change.
std::string draft_copy(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json"})
    fs::copy_file(fs::path(kDraft) / f, dir / f);
  fs::create_symlink(fs::canonical(fs::path(kDraft) / "model.safetensors"),
                     dir / "model.safetensors");
  return dir.string();
}

void edit_json(const std::string& path, const std::function<void(Json&)>& edit) {
  Json j = load_json_file(path);
  edit(j);
  std::ofstream(path) << j.dump();
}

LoadOptions cpu_f32() {
  LoadOptions o;
  o.device = parse_device("cpu");
  o.dtype = DType::kF32;
  return o;
}

TEST(DraftSetup, Settings) {
  EXPECT_FALSE(draft_of(settings({})).has_value());
  const DraftOptions a = *draft_of(settings({"--draft-model", kDraft}));
  EXPECT_EQ(a.dir, kDraft);
  EXPECT_EQ(a.num_speculative_tokens, 5);
  EXPECT_FALSE(a.dtype.has_value());
  EXPECT_TRUE(a.model_type.empty());
  // RTP-LLM's variables.
  const DraftOptions b = *draft_of(settings({}, Env{{{"SP_CHECKPOINT_PATH", kDraft},
                                                     {"GEN_NUM_PER_CIRCLE", "8"},
                                                     {"SP_WEIGHT_TYPE", "FP16"},
                                                     {"SP_MODEL_TYPE", "llama"}}}));
  EXPECT_EQ(b.dir, kDraft);
  EXPECT_EQ(b.source, "SP_CHECKPOINT_PATH");
  EXPECT_EQ(b.num_speculative_tokens, 8);
  EXPECT_EQ(b.dtype, DType::kF16);
  EXPECT_EQ(b.model_type, "llama");
  EXPECT_EQ(draft_of(settings({"--draft-model", kDraft, "--draft-dtype", "bf16"}))->dtype,
            DType::kBF16);
}

TEST(DraftSetup, RefusesBadSettings) {
  // k out of 1..16, from the flag or the variable.
  for (const char* k : {"0", "17", "-1"})
    expect_error(error_of([&] {
                   settings({"--num-speculative-tokens", k});
                 }),
                 {"num-speculative-tokens"});
  expect_error(error_of([] {
                 settings({}, Env{{{"GEN_NUM_PER_CIRCLE", "40"}}});
               }),
               {"GEN_NUM_PER_CIRCLE"});
  // A folder that is not there.
  expect_error(error_of([] {
                 draft_of(settings({"--draft-model", "/nonexistent/draft"}));
               }),
               {"--draft-model", "/nonexistent/draft", "does not exist"});
  expect_error(error_of([] {
                 draft_of(settings({}, Env{{{"SP_CHECKPOINT_PATH", "/nonexistent/d"}}}));
               }),
               {"SP_CHECKPOINT_PATH", "/nonexistent/d"});
  // A dtype that is not a compute dtype.
  expect_error(error_of([] {
                 draft_of(settings({"--draft-model", kDraft}, Env{{{"SP_WEIGHT_TYPE", "int8"}}}));
               }),
               {"SP_WEIGHT_TYPE", "int8"});
  // Draft settings without a draft.
  expect_error(error_of([] {
                 draft_of(settings({"--draft-dtype", "f16"}));
               }),
               {"--draft-dtype", "--draft-model"});
  expect_error(error_of([] {
                 draft_of(settings({}, Env{{{"SP_MODEL_TYPE", "llama"}}}));
               }),
               {"SP_MODEL_TYPE"});
}

TEST(DraftSetup, VocabularyChecks) {
  const ModelConfig target = load_model_config(kTarget);
  const ModelConfig draft = load_model_config(kDraft);
  check_draft_vocabulary(kTarget, target, kDraft, draft);  // the bundled pair agrees
  // A padded embedding: the tokenizer's 32000 tokens fit both.
  ModelConfig padded = draft;
  padded.vocab_size = 32064;
  check_draft_vocabulary(kTarget, target, kDraft, padded);
  // An embedding smaller than the tokenizer's vocabulary.
  ModelConfig small = draft;
  small.vocab_size = 31000;
  expect_error(error_of([&] { check_draft_vocabulary(kTarget, target, kDraft, small); }),
               {"31000", "32000"});

  // A tokenizer with two ids swapped.
  const std::string swapped = draft_copy("draft_swapped");
  edit_json(swapped + "/tokenizer.json", [](Json& j) {
    Json& vocab = j["model"]["vocab"];
    std::string a, b;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (it.value() == 1000) a = it.key();
      if (it.value() == 1001) b = it.key();
    }
    vocab[a] = 1001;
    vocab[b] = 1000;
  });
  expect_error(error_of([&] { check_draft_vocabulary(kTarget, target, swapped, draft); }),
               {"token 1000"});
  // Another EOS token.
  const std::string eos = draft_copy("draft_eos");
  edit_json(eos + "/tokenizer_config.json", [](Json& j) { j["eos_token"] = "<unk>"; });
  expect_error(error_of([&] { check_draft_vocabulary(kTarget, target, eos, draft); }),
               {"EOS", "<unk>", "</s>"});
  // Without a tokenizer in the draft, the configs' special ids must agree.
  const std::string bare = draft_copy("draft_bare");
  fs::remove(bare + "/tokenizer.json");
  check_draft_vocabulary(kTarget, target, bare, draft);
  ModelConfig other_eos = draft;
  other_eos.eos_token_ids = {7};
  expect_error(error_of([&] { check_draft_vocabulary(kTarget, target, bare, other_eos); }),
               {"EOS"});
}

TEST(DraftSetup, BuildsTheProposerFromTheBudget) {
  const LoadOptions opts = cpu_f32();
  auto target = load_model(kTarget, opts);
  EngineConfig c;
  c.max_num_seqs = 4;
  c.kv_cache_bytes = 8 << 20;
  c.eos_token_ids = {2};
  EXPECT_EQ(proposer_of(settings({}), kTarget, *target, opts, &c), nullptr);
  EXPECT_EQ(c.kv_cache_bytes, 8 << 20);

  std::shared_ptr<Proposer> p =
      proposer_of(settings({"--draft-model", kDraft, "--draft-model-type", "llama"}), kTarget,
                  *target, opts, &c);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name(), "draft_model");
  // Both caches hold as many tokens: f32 K/V of 2 layers x 2 heads x 32 (draft) against
  // 6 x 4 x 32 (model), so the draft takes a seventh of the budget, within a block.
  const auto& draft = dynamic_cast<const DraftModelProposer&>(*p);
  const int64_t draft_bytes = int64_t{draft.num_blocks()} * 16 * 2 * 2 * 32 * 2 * 4;
  EXPECT_EQ(c.kv_cache_bytes + draft_bytes, 8 << 20);
  EXPECT_NEAR(static_cast<double>(draft_bytes), (8 << 20) / 7.0, 16 * 1024);
  EXPECT_EQ(draft.config().vocab_size, 32000);
  EXPECT_EQ(draft.config().eos_token_ids, std::vector<int32_t>{2});

  // It proposes the draft's continuation of "In the beginning God created" (" the
  // world", as transformers computes it: tests/engine/data/kjv_reference.json).
  const std::vector<int32_t> prompt = {1, 560, 272, 5398, 2499, 3859};
  GenerateConfig greedy;
  greedy.temperature = 0.0f;
  ProposalRequest r;
  r.tokens = prompt;
  r.prompt_len = 6;
  r.max_tokens = 2;
  r.config = &greedy;
  std::vector<Proposal> out(1);
  p->propose(std::span<const ProposalRequest>(&r, 1), out);
  EXPECT_EQ(out[0].tokens, (std::vector<int32_t>{272, 1526}));

  // An explicit block count: the draft holds as many tokens beside it.
  EngineConfig blocks;
  blocks.max_num_seqs = 64;
  blocks.num_kv_blocks = 100;
  auto q = proposer_of(settings({"--draft-model", kDraft}), kTarget, *target, opts, &blocks);
  EXPECT_EQ(dynamic_cast<const DraftModelProposer&>(*q).num_blocks(), 100);
  EXPECT_EQ(blocks.num_kv_blocks, 100);

  // vLLM's form names the folder and the number of drafts the same way.
  EngineConfig json = blocks;
  const std::string config =
      R"({"method": "draft_model", "model": ")" + kDraft + R"(", "num_speculative_tokens": 3})";
  auto j = proposer_of(settings({"--speculative-config", config}), kTarget, *target, opts, &json);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->name(), "draft_model");
  EXPECT_EQ(draft_of(settings({"--speculative-config", config}))->num_speculative_tokens, 3);
}

TEST(DraftSetup, RefusesADraftThatDoesNotMatch) {
  const LoadOptions opts = cpu_f32();
  auto target = load_model(kTarget, opts);
  EngineConfig c;
  c.kv_cache_bytes = 8 << 20;
  const std::string swapped = draft_copy("draft_swapped_vocab");
  edit_json(swapped + "/tokenizer.json", [](Json& j) {
    Json& vocab = j["model"]["vocab"];
    std::string a, b;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (it.value() == 500) a = it.key();
      if (it.value() == 501) b = it.key();
    }
    vocab[a] = 501;
    vocab[b] = 500;
  });
  expect_error(error_of([&] {
                 proposer_of(settings({"--draft-model", swapped}), kTarget, *target, opts, &c);
               }),
               {"--draft-model", "draft_swapped_vocab", "token 500"});
  const std::string small = draft_copy("draft_small_vocab");
  edit_json(small + "/config.json", [](Json& j) { j["vocab_size"] = 30000; });
  expect_error(error_of([&] {
                 proposer_of(settings({"--draft-model", small}), kTarget, *target, opts, &c);
               }),
               {"30000", "32000"});
  expect_error(error_of([&] {
                 proposer_of(settings({"--draft-model", kDraft}, Env{{{"SP_MODEL_TYPE", "gpt2"}}}),
                             kTarget, *target, opts, &c);
               }),
               {"SP_MODEL_TYPE", "gpt2", "llama"});
  EXPECT_EQ(c.kv_cache_bytes, 8 << 20);  // nothing taken
  // No room in the budget.
  EngineConfig tiny;
  tiny.kv_cache_bytes = 1024;
  EXPECT_THROW(proposer_of(settings({"--draft-model", kDraft}), kTarget, *target, opts, &tiny),
               ResourceExhausted);
}

}  // namespace
}  // namespace tachyon::cli
