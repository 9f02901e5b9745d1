// The engine over the real trained model (models/tiny-kjv-chat) and its tokenizer, with
// the frontend's text (TextEngine): transformers' greedy continuations, batch invariance and
// preemption. The model loads on the default device: TACHYON_DEVICE (cpu, cuda), else a GPU when
// there is one (TACHYON_DTYPE picks its compute dtype). On a GPU, batch invariance needs
// TACHYON_BATCH_INVARIANT=1 (see docs/architecture.md); tokens are then sampled on the
// device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/json.h"
#include "frontend/text_engine.h"
#include "model/loader.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;

struct Kjv {
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<int32_t> eos;
};

const Kjv& kjv() {
  static const Kjv k = [] {
    Kjv k;
    k.model = load_model(kRoot + "/models/tiny-kjv-chat");
    k.tokenizer = Tokenizer::load(kRoot + "/models/tiny-kjv-chat");
    for (int64_t e : k.model->config().eos_token_ids) k.eos.push_back(static_cast<int32_t>(e));
    return k;
  }();
  return k;
}

std::unique_ptr<TextEngine> engine(int32_t blocks, int32_t max_batch_tokens = 256,
                                   bool device_sampling = true, int64_t swap_bytes = 0,
                                   bool prefix_caching = true) {
  EngineConfig c;
  c.prefix_caching = prefix_caching;
  c.device_sampling = device_sampling;
  c.swap_space_bytes = swap_bytes;
  c.num_kv_blocks = blocks;
  c.block_size = 16;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = max_batch_tokens;
  c.eos_token_ids = kjv().eos;
  // One engine at a time owns the model's cache: the tests run one after another.
  return std::make_unique<TextEngine>(kjv().model,
                                      make_text_tokenizer(kjv().tokenizer, c.eos_token_ids), c);
}

GenerateConfig greedy(int32_t max_new) {
  GenerateConfig c;
  c.temperature = 0.0f;
  c.max_new_tokens = max_new;
  return c;
}

TEST(KjvEngine, GreedyMatchesTransformers) {
  const Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  const Json& cases = ref["models"]["tiny-kjv-chat"];
  ASSERT_GT(cases.size(), 0u);
  // The references are transformers' float32 greedy outputs; a 16-bit GPU model drifts
  // from them after a few near ties (tests/backend/cuda/cuda_model_test.cc bounds its logits).
  if (kjv().model->backend().activation_dtype() != DType::kF32)
    GTEST_SKIP() << "float32 references: run with TACHYON_DTYPE=f32 on a GPU";
  auto e = engine(512);
  // All prompts at once: they share steps.
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Json& c : cases)
    streams.push_back(e->submit({c["prompt_ids"].get<std::vector<int32_t>>(), greedy(48)}));
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    std::vector<int32_t> want = c["greedy"][0].get<std::vector<int32_t>>();
    const bool ends_with_eos = !want.empty() && want.back() == kjv().eos[0];
    if (ends_with_eos) want.pop_back();
    const GenerateResult r = streams[i]->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    EXPECT_EQ(r.sequences[0].output_ids, want) << c["prompt"].get<std::string>();
    EXPECT_EQ(r.sequences[0].finish_reason,
              ends_with_eos ? FinishReason::kStop : FinishReason::kLength);
    EXPECT_EQ(r.sequences[0].text, c["greedy"][1].get<std::string>());
  }
  const auto s = e->stats();
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
}

// The reference prompts followed by random ones; greedy and seeded sampling.
std::vector<GenerateRequest> requests(int n) {
  const Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  std::vector<std::vector<int32_t>> prompts;
  for (const Json& c : ref["models"]["tiny-kjv-chat"])
    prompts.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
  std::mt19937 rng(21);
  while (static_cast<int>(prompts.size()) < n) {
    std::vector<int32_t> p = {1};
    const int len = 2 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) p.push_back(100 + static_cast<int32_t>(rng() % 30000));
    prompts.push_back(p);
  }
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt_ids = prompts[static_cast<size_t>(i)];
    r.config = greedy(8);
    if (i % 4 == 1) {
      r.config.temperature = 0.8f;
      r.config.top_p = 0.9f;
      r.config.random_seed = 1000 + static_cast<uint64_t>(i);
    } else if (i % 4 == 3) {  // every device-side parameter
      r.config.temperature = 0.9f;
      r.config.top_k = 40;
      r.config.top_p = 0.95f;
      r.config.min_p = 0.02f;
      r.config.repetition_penalty = 1.2f;
      r.config.presence_penalty = 0.3f;
      r.config.frequency_penalty = 0.2f;
      r.config.random_seed = 2000 + static_cast<uint64_t>(i);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::vector<int32_t>> run_together(TextEngine& e,
                                               const std::vector<GenerateRequest>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(e.submit(r));
  std::vector<std::vector<int32_t>> out;
  for (auto& s : streams) {
    const auto r = s->wait();
    EXPECT_FALSE(r.error) << r.error->message;
    out.push_back(r.sequences.at(0).output_ids);
  }
  return out;
}

TEST(KjvEngine, BatchInvariance) {
  const auto reqs = requests(64);
  auto e = engine(1024);
  const auto together = run_together(*e, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto alone = e->submit(reqs[i])->wait();
    EXPECT_EQ(together[i], alone.sequences.at(0).output_ids) << "request " << i;
  }
}

// Greedy tokens chosen on the device (where the model samples there) equal the host
// sampler's on the same logits.
TEST(KjvEngine, DeviceSamplingMatchesHostGreedy) {
  auto reqs = requests(24);
  for (auto& r : reqs) r.config = greedy(16);
  // One request at a time: the same steps (and logits) on both paths.
  auto run_alone = [&](bool device_sampling) {
    auto e = engine(1024, 256, device_sampling);
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : reqs) {
      const auto res = e->submit(r)->wait();
      EXPECT_FALSE(res.error) << res.error->message;
      out.push_back(res.sequences.at(0).output_ids);
    }
    return out;
  };
  const auto host = run_alone(false);
  const auto device = run_alone(true);
  EXPECT_EQ(device, host);
}

// The outputs of requests(32) run together with room for all (no preemption), computed
// once for the tests that compare against them.
const std::vector<std::vector<int32_t>>& ample_outputs() {
  static const auto out = [] {
    auto e = engine(1024);
    auto o = run_together(*e, requests(32));
    EXPECT_EQ(e->stats().num_preemptions, 0);
    return o;
  }();
  return out;
}

TEST(KjvEngine, PreemptionKeepsOutputs) {
  const auto reqs = requests(32);
  const auto& ample = ample_outputs();
  std::vector<std::vector<int32_t>> tiny;
  int64_t preemptions = 0;
  {
    // The longest request holds 42 + 8 tokens: 4 blocks. Six blocks for 32 requests.
    auto e = engine(6);
    tiny = run_together(*e, reqs);
    preemptions = e->stats().num_preemptions;
    const auto s = e->stats();
    EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(tiny, ample);
}

// Preempted requests swapped out to host memory and back resume where they left off:
// the same outputs as with room for all, and fewer tokens through the model than when
// they are recomputed.
TEST(KjvEngine, SwappedOutRequestsKeepOutputsWithoutRecompute) {
  const auto reqs = requests(32);
  std::vector<std::vector<int32_t>> swapped;
  int64_t recompute_tokens = 0;
  {
    auto e = engine(6);
    run_together(*e, reqs);
    recompute_tokens = e->stats().tokens_computed;
  }
  {
    const int64_t block_bytes = static_cast<int64_t>(kjv().model->kv_bytes_per_block(16));
    auto e = engine(6, 256, true, 64 * block_bytes);
    swapped = run_together(*e, reqs);
    const auto s = e->stats();
    EXPECT_EQ(s.num_swap_blocks, 64);
    EXPECT_GT(s.num_swap_outs, 0);
    EXPECT_EQ(s.num_swap_outs, s.num_preemptions);  // every request here fits the swap space
    EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
    EXPECT_EQ(s.num_free_swap_blocks, s.num_swap_blocks);
    EXPECT_LT(s.tokens_computed, recompute_tokens);
  }
  EXPECT_EQ(swapped, ample_outputs());
}

// The prefix cache changes no output: requests(32) run without the cache; then twice
// with it (the second time every prompt of a whole block or more takes its blocks from
// the cache), and once more as second turns (each prompt followed by its output and a
// new part), against the same turns without the cache. Greedy rows return their
// log-probabilities, which agree too.
TEST(KjvEngine, PrefixCacheKeepsOutputs) {
  auto reqs = requests(32);
  for (size_t i = 0; i < reqs.size(); i += 2) reqs[i].config.return_logprobs = true;
  struct Run {
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::vector<float>> logprobs;
    int64_t reused = 0;
  };
  auto run = [](TextEngine& e, const std::vector<GenerateRequest>& rs) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : rs) streams.push_back(e.submit(r));
    Run out;
    for (auto& s : streams) {
      const auto r = s->wait();
      EXPECT_FALSE(r.error) << r.error->message;
      out.ids.push_back(r.sequences.at(0).output_ids);
      out.logprobs.push_back(r.sequences.at(0).logprobs);
      out.reused += r.timings.reuse_len;
    }
    return out;
  };
  auto second_turns = [&](const Run& first) {
    auto turns = reqs;
    for (size_t i = 0; i < turns.size(); ++i) {
      auto& p = turns[i].prompt_ids;
      p.insert(p.end(), first.ids[i].begin(), first.ids[i].end());
      for (int32_t k = 0; k < 5; ++k) p.push_back(200 + static_cast<int32_t>(i) * 7 + k);
    }
    return turns;
  };
  const float tol = kjv().model->backend().activation_dtype() == DType::kF32 ? 1e-4f : 1e-2f;
  // Four blocks per request at most: a cache that holds a third of them evicts.
  for (const int32_t blocks : {1024, 48}) {
    Run off, off_turns;
    {
      auto e = engine(blocks, 256, true, 0, /*prefix_caching=*/false);
      off = run(*e, reqs);
      off_turns = run(*e, second_turns(off));
    }
    auto e = engine(blocks);
    const Run miss = run(*e, reqs);
    const Run hit = run(*e, reqs);
    const Run turns = run(*e, second_turns(miss));
    EXPECT_GT(hit.reused, 0);
    EXPECT_GT(turns.reused, 0);
    if (blocks == 1024) EXPECT_EQ(e->stats().num_preemptions, 0);
    for (const Run* r : {&miss, &hit}) {
      EXPECT_EQ(r->ids, off.ids) << blocks << " blocks";
      for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_EQ(r->logprobs[i].size(), off.logprobs[i].size());
        for (size_t k = 0; k < r->logprobs[i].size(); ++k)
          EXPECT_NEAR(r->logprobs[i][k], off.logprobs[i][k], tol) << "request " << i;
      }
    }
    EXPECT_EQ(turns.ids, off_turns.ids) << blocks << " blocks";
  }
}

// Requests that arrive together with a common stem: the later ones take the stem's
// blocks in the very step the first computes them (its K/V written before any attention
// reads), and every output is the output without the cache.
TEST(KjvEngine, RequestsArrivingTogetherShareTheStemAsItIsComputed) {
  std::mt19937 rng(5);
  std::vector<int32_t> stem = {1};
  for (int i = 0; i < 70; ++i) stem.push_back(100 + static_cast<int32_t>(rng() % 30000));
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r;
    r.prompt_ids = stem;
    for (int k = 0; k < 3 + i; ++k) r.prompt_ids.push_back(300 + 11 * i + k);
    r.config = greedy(6);
    r.config.return_logprobs = true;
    reqs.push_back(std::move(r));
  }
  auto run = [&](bool cache, int64_t* reused) {
    auto e = engine(1024, 512, true, 0, cache);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(e->submit(r));
    std::vector<std::pair<std::vector<int32_t>, std::vector<float>>> out;
    for (auto& s : streams) {
      const auto r = s->wait();
      EXPECT_FALSE(r.error) << r.error->message;
      out.emplace_back(r.sequences.at(0).output_ids, r.sequences.at(0).logprobs);
      *reused += r.timings.reuse_len;
    }
    return out;
  };
  int64_t reused_off = 0, reused_on = 0;
  const auto off = run(false, &reused_off);
  const auto on = run(true, &reused_on);
  EXPECT_EQ(reused_off, 0);
  EXPECT_EQ(reused_on, 5 * 64);  // four whole blocks of the stem for each later request
  const float tol = kjv().model->backend().activation_dtype() == DType::kF32 ? 1e-4f : 1e-2f;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(on[i].first, off[i].first) << "request " << i;
    ASSERT_EQ(on[i].second.size(), off[i].second.size());
    for (size_t k = 0; k < on[i].second.size(); ++k)
      EXPECT_NEAR(on[i].second[k], off[i].second[k], tol) << "request " << i;
  }
}

}  // namespace
}  // namespace tachyon
