// The engine's device-sampling path (ForwardBatch::sampling -> forward_sample ->
// token ids) on the CPU: token_adjustments reproduces process_logits, and an engine
// over a model that "samples on its device" (here with the host Sampler's rules, so the
// outputs must be identical) gives the same outputs as the host path for every kind of
// request: greedy, seeded, n > 1, penalties and bans, logprobs, beams.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace tachyon::testing {
namespace {

TEST(DeviceSampling, AdjustmentsReproduceProcessLogits) {
  std::mt19937 rng(4);
  const int32_t V = 300;
  for (int trial = 0; trial < 400; ++trial) {
    GenerateConfig c;
    if (rng() % 2) c.repetition_penalty = 0.5f + static_cast<float>(rng() % 20) * 0.1f;
    if (rng() % 2)
      c.presence_penalty = static_cast<float>(static_cast<int>(rng() % 41) - 20) * 0.1f;
    if (rng() % 2)
      c.frequency_penalty = static_cast<float>(static_cast<int>(rng() % 41) - 20) * 0.1f;
    if (rng() % 3 == 0) {
      for (int i = 0; i < 5; ++i)
        c.logit_bias.emplace_back(static_cast<int32_t>(i * 50 + rng() % 50), -5.f + rng() % 10);
    }
    if (rng() % 3 == 0) c.no_repeat_ngram_size = 1 + static_cast<int32_t>(rng() % 3);
    if (rng() % 3 == 0)
      c.bad_words_list = {{static_cast<int32_t>(rng() % 20)},
                          {static_cast<int32_t>(rng() % 20), 7}};
    if (rng() % 3 == 0) c.min_new_tokens = static_cast<int32_t>(rng() % 10);
    std::vector<int32_t> tokens;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) tokens.push_back(static_cast<int32_t>(rng() % 20));
    const int32_t prompt_len = static_cast<int32_t>(rng() % static_cast<uint32_t>(len));
    const std::vector<int32_t> eos = {2, 5};
    SamplingContext ctx{&c, tokens, prompt_len, eos, {}};
    std::vector<float> logits(V);
    std::normal_distribution<float> d(0.f, 3.f);
    for (float& x : logits) x = d(rng);
    std::vector<float> want = logits, got = logits;
    process_logits(want.data(), V, ctx);
    std::vector<TokenAdjustment> adj;
    token_adjustments(ctx, V, &adj);
    for (size_t i = 1; i < adj.size(); ++i) ASSERT_LT(adj[i - 1].token, adj[i].token);
    const RowSampling row = row_sampling(c, RngKey{});
    apply_token_adjustments(got.data(), V, row, adj);
    for (int32_t v = 0; v < V; ++v)
      ASSERT_EQ(got[v], want[v]) << "trial " << trial << " token " << v;
    if (processors_inactive(ctx)) {
      EXPECT_TRUE(adj.empty()) << trial;
    }
  }
}

std::vector<GenerateRequest> mixed_requests(int n, int32_t vocab) {
  std::mt19937 rng(8);
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 3 + static_cast<int32_t>(rng() % 20), vocab, 2);
    GenerateConfig& c = r.config;
    c.max_new_tokens = 12;
    c.random_seed = 100 + static_cast<uint64_t>(i);
    switch (i % 8) {
      case 0:
        c.temperature = 0.f;
        break;
      case 1:
        c.temperature = 0.9f, c.top_p = 0.8f;
        break;
      case 2:
        c.top_k = 5, c.repetition_penalty = 1.3f;
        break;
      case 3:
        c.num_return_sequences = 3, c.min_p = 0.1f, c.presence_penalty = 0.5f;
        break;
      case 4:
        c.return_logprobs = true, c.top_logprobs = 2, c.frequency_penalty = 0.3f;
        break;
      case 5:
        c.num_beams = 3, c.num_return_sequences = 2;
        break;
      case 6:
        c.no_repeat_ngram_size = 2, c.min_new_tokens = 6, c.bad_words_list = {{7}};
        break;
      default:
        c.logit_bias = {{3, 4.f}, {9, -2.f}}, c.temperature = 0.7f;
        break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

TEST(DeviceSampling, EngineOutputsEqualHostPath) {
  FakeModelOptions o;
  o.vocab = 50;
  o.eos_bias = -1.f;
  EngineConfig ec;
  ec.max_num_seqs = 32;
  ec.max_num_batched_tokens = 64;
  ec.num_kv_blocks = 400;
  ec.eos_token_ids = {o.eos};
  const auto reqs = mixed_requests(40, o.vocab);
  std::vector<std::vector<GenerateResult>> results(2);
  int64_t device_rows = 0;
  for (int pass = 0; pass < 2; ++pass) {
    auto model = std::make_shared<DeviceSamplingModel>(o);
    EngineConfig c = ec;
    c.device_sampling = pass == 1;
    AsyncModel engine(model, c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(engine.submit(r));
    for (auto& s : streams) results[static_cast<size_t>(pass)].push_back(s->wait());
    if (pass == 1) device_rows = model->device_rows();
    EXPECT_EQ(model->violations(), 0);
  }
  EXPECT_GT(device_rows, 100);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& a = results[0][i];
    const auto& b = results[1][i];
    ASSERT_FALSE(a.error) << a.error->message;
    ASSERT_FALSE(b.error) << b.error->message;
    ASSERT_EQ(a.sequences.size(), b.sequences.size()) << i;
    for (size_t k = 0; k < a.sequences.size(); ++k) {
      EXPECT_EQ(a.sequences[k].output_ids, b.sequences[k].output_ids) << "request " << i;
      EXPECT_EQ(a.sequences[k].finish_reason, b.sequences[k].finish_reason) << "request " << i;
      EXPECT_EQ(a.sequences[k].logprobs, b.sequences[k].logprobs) << "request " << i;
      EXPECT_NEAR(a.sequences[k].cum_log_prob, b.sequences[k].cum_log_prob, 1e-5)
          << "request " << i;
    }
  }
}

// Every token banned: the request fails with the host path's error, others go on.
TEST(DeviceSampling, NoAllowedTokenFailsTheRequest) {
  FakeModelOptions o;
  o.vocab = 8;
  EngineConfig ec;
  ec.num_kv_blocks = 64;
  ec.eos_token_ids = {o.eos};
  auto model = std::make_shared<DeviceSamplingModel>(o);
  AsyncModel engine(model, ec);
  GenerateRequest bad;
  bad.prompt_ids = {1, 3};
  bad.config.max_new_tokens = 4;
  for (int32_t t = 0; t < o.vocab; ++t) bad.config.bad_words_list.push_back({t});
  GenerateRequest good;
  good.prompt_ids = {1, 4};
  good.config.max_new_tokens = 4;
  auto s1 = engine.submit(bad);
  auto s2 = engine.submit(good);
  const auto r1 = s1->wait();
  const auto r2 = s2->wait();
  ASSERT_TRUE(r1.error);
  EXPECT_EQ(r1.error->code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(r2.error);
  EXPECT_GT(model->device_rows(), 0);
}

}  // namespace
}  // namespace tachyon::testing
