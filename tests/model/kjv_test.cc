// The bundled trained Llama model (models/tiny-kjv-chat, bf16) against transformers'
// greedy generations in tests/engine/data/kjv_reference.json: prefill the prompt ids,
// then one token per step through the paged cache until EOS.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/json.h"
#include "model/loader.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

TEST(KjvModel, GreedyMatchesTransformers) {
  const std::string root = TACHYON_SOURCE_DIR;
  // f32 arithmetic wherever it runs (the reference is transformers in float32; the GPU
  // at 16-bit precision is checked with margins in tests/backend/cuda).
  LoadOptions opts;
  opts.dtype = DType::kF32;
  auto model = load_model(root + "/models/tiny-kjv-chat", opts);
  const ModelConfig& cfg = model->config();
  ASSERT_EQ(cfg.family, "llama");
  ASSERT_FALSE(cfg.eos_token_ids.empty());
  const int32_t eos = static_cast<int32_t>(cfg.eos_token_ids[0]);
  Json ref = load_json_file(root + "/tests/engine/data/kjv_reference.json");
  const int32_t block = 16;
  model->init_kv_cache(64, block);
  const int64_t vocab = model->vocab_size();
  for (const Json& c : ref["models"]["tiny-kjv-chat"]) {
    std::vector<int32_t> tokens = c["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> want = c["greedy"][0].get<std::vector<int32_t>>();
    std::vector<int32_t> got;
    int32_t computed = 0;
    while (got.size() < want.size()) {
      // Blocks in reverse order to exercise the block table.
      const ForwardBatch b = testing_util::next_step(tokens, computed, block, 64);
      const int32_t n = b.num_tokens();
      Tensor logits = model->forward(b);
      computed += n;
      const float* p = logits.data<float>();
      const int32_t next = static_cast<int32_t>(std::max_element(p, p + vocab) - p);
      got.push_back(next);
      if (next == eos) break;
      tokens.push_back(next);
    }
    EXPECT_EQ(got, want) << "prompt: " << c["prompt"].get<std::string>();
  }
}

}  // namespace
}  // namespace tachyon
