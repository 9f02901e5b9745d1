// Random checkpoints: the tensors planned for each fixture's config are exactly the
// ones transformers wrote for it (names and shapes), and a random model of every
// family loads and runs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "conformance/fixture_dir.h"
#include "core/json.h"
#include "io/checkpoint.h"
#include "model/loader.h"
#include "model/random_model.h"
#include "model/registry.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;

// Each fixture's checkpoint folder (materialised from its manifest where it has one).
std::vector<fs::path> fixture_dirs() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(testing_util::fixtures_source_dir()))
    if (fs::exists(e.path() / "config.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<fs::path> out;
  for (const auto& n : names) out.push_back(testing_util::fixture(n));
  return out;
}

TEST(RandomModel, PlanMatchesFixtureCheckpoints) {
  for (const fs::path& dir : fixture_dirs()) {
    HfConfig cfg = HfConfig::load((dir / "config.json").string());
    ModelConfig mc = map_model_config(cfg, "");
    auto plan = plan_random_tensors(mc, find_arch(cfg, "").map_weights(mc));
    auto ckpt = Checkpoint::open(dir.string());
    size_t matched = 0;
    for (const auto& t : plan) {
      ASSERT_TRUE(ckpt->contains(t.name)) << dir.filename() << ": " << t.name;
      EXPECT_EQ(ckpt->info(t.name).shape, t.shape) << dir.filename() << ": " << t.name;
      ++matched;
    }
    // Every floating tensor of the checkpoint with a layer or model prefix is planned
    // (non-parameter entries such as GPT-2's causal-mask buffers or the rotary inv_freq
    // buffers of ChatGLM checkpoints aside).
    size_t weights = 0;
    for (const auto& name : ckpt->names()) {
      if (name.find(".attn.bias") != std::string::npos ||
          name.find(".attn.masked_bias") != std::string::npos ||
          name.find("inv_freq") != std::string::npos || name.rfind("case", 0) == 0)
        continue;
      if (mc.tie_word_embeddings && name == "lm_head.weight") continue;
      ++weights;
    }
    EXPECT_EQ(matched, weights) << dir.filename();
  }
}

TEST(RandomModel, EveryFamilyLoadsAndRuns) {
  const fs::path out = fs::temp_directory_path() / ("tachyon_random_" + std::to_string(::getpid()));
  for (const fs::path& dir : fixture_dirs()) {
    RandomModelOptions opts;
    opts.dtype = DType::kBF16;
    opts.seed = 3;
    opts.shard_bytes = 40000;  // force several shards
    write_random_model((dir / "config.json").string(), out.string(), opts);
    EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json")) << dir.filename();
    auto model = load_model(out.string());
    model->init_kv_cache(8, 8);
    ForwardBatch b;
    b.token_ids = {3, 1, 4, 1, 5};
    // A prefix-LM prompt (ChatGLM-6B) ends its context with <sop> after a mask token.
    if (const GlmPromptConfig& g = model->config().glm_prompt; g.enabled())
      b.token_ids = {3, 1, static_cast<int32_t>(g.mask_token_ids.at(0)),
                     static_cast<int32_t>(g.context_end_token), 5};
    b.layouts = {model->prompt_layout(b.token_ids)};
    b.positions = {0, 1, 2, 3, 4};
    b.query_start = {0, 5};
    b.context_lens = {5};
    b.block_tables = {7};
    b.max_blocks_per_seq = 1;
    b.logits_rows = {4};
    Tensor logits = model->forward(b);
    double ss = 0;
    for (int64_t i = 0; i < logits.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(logits.data<float>()[i])) << dir.filename();
      ss += double{logits.data<float>()[i]} * logits.data<float>()[i];
    }
    EXPECT_GT(ss, 0.0) << dir.filename();
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace tachyon
