// Speculative decoding over real architectures with random weights (the conformance
// fixtures: llama and qwen2 with grouped-query attention, bloom with ALiBi, gpt2 with
// learned positions, mistral): greedy outputs token for token those of plain decoding,
// with right, random and mixed drafts and with n-gram lookup, under preemption and small
// steps.
#include <gtest/gtest.h>

#include "conformance/fixture_dir.h"
#include "core/json.h"
#include "engine/async_model.h"
#include "engine/ngram_proposer.h"
#include "engine/recorded_proposer.h"
#include "model/loader.h"

namespace tachyon::testing {
namespace {

std::vector<std::vector<int32_t>> fixture_prompts(const std::string& name) {
  const Json ref = load_json_file(testing_util::fixture_source_dir(name) + "/reference.json");
  std::vector<std::vector<int32_t>> prompts;
  for (const Json& c : ref["cases"]) prompts.push_back(c["input_ids"].get<std::vector<int32_t>>());
  // A prompt that repeats itself: the n-gram lookup finds its drafts there.
  std::vector<int32_t> rep = prompts.back();
  rep.insert(rep.end(), prompts.back().begin(), prompts.back().end());
  prompts.push_back(rep);
  return prompts;
}

std::vector<std::vector<int32_t>> run(const std::shared_ptr<Model>& model, EngineConfig c,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      int32_t max_new, EngineStats* stats = nullptr) {
  AsyncModel engine(model, c);
  GenerateConfig g;
  g.temperature = 0.0f;
  g.max_new_tokens = max_new;
  g.ignore_eos = true;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(engine.submit({p, g}));
  std::vector<std::vector<int32_t>> out;
  for (auto& s : streams) {
    const GenerateResult r = s->wait();
    EXPECT_FALSE(r.error) << r.error->message;
    out.push_back(r.error ? std::vector<int32_t>{} : r.sequences.at(0).output_ids);
  }
  if (stats) *stats = engine.stats();
  return out;
}

TEST(SpeculativeConformance, GreedyOutputsAreThoseOfPlainDecoding) {
  constexpr int32_t kMaxNew = 40;
  for (const std::string name : {"llama", "qwen2", "bloom", "gpt2", "mistral"}) {
    SCOPED_TRACE(name);
    const std::shared_ptr<Model> model = load_model(testing_util::fixture(name));
    const auto prompts = fixture_prompts(name);
    EngineConfig base;
    base.block_size = 4;
    base.num_kv_blocks = 256;
    base.max_num_seqs = 8;
    base.max_num_batched_tokens = 64;
    const auto plain = run(model, base, prompts, kMaxNew);
    std::vector<EngineConfig> configs = {base, base};
    configs[1].num_kv_blocks = 24;  // 96 slots for 4 sequences of up to 86: preemption
    configs[1].max_num_batched_tokens = 8;
    configs[1].max_num_seqs = 4;
    configs[1].prefix_caching = false;
    int64_t preemptions = 0;
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      for (int mode = 0; mode < 4; ++mode) {
        EngineConfig c = configs[ci];
        c.num_speculative_tokens = 4;
        if (mode == 3) {
          c.proposer = std::make_shared<NgramProposer>(1, 3);
        } else {
          auto p = std::make_shared<RecordedProposer>(static_cast<RecordedProposer::Mode>(mode),
                                                      model->vocab_size());
          for (size_t i = 0; i < prompts.size(); ++i) p->add(prompts[i], plain[i]);
          c.proposer = p;
        }
        EngineStats s;
        EXPECT_EQ(run(model, c, prompts, kMaxNew, &s), plain)
            << "config " << ci << " mode " << mode;
        EXPECT_GT(s.spec_num_drafts, 0) << "config " << ci << " mode " << mode;
        if (mode == 0) {
          EXPECT_GT(s.spec_num_accepted_tokens, 0) << "config " << ci;
        }
        preemptions += s.num_preemptions;
      }
    }
    EXPECT_GT(preemptions, 0);
  }
}

}  // namespace
}  // namespace tachyon::testing
