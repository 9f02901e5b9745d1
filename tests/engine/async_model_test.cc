#include "engine/async_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "engine/engine_test_util.h"
#include "model/lora_slots.h"

namespace tachyon {
namespace {

using testing::FakeModelOptions;
using testing::greedy;
using ::testing::HasSubstr;
using testing::make_engine;
using testing::random_prompt;
using testing::reference_generate;
using testing::small_engine;

void expect_all_free(const AsyncModel& e) {
  const EngineStats s = e.stats();
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
}

TEST(AsyncModel, GreedyMatchesTheReferenceAcrossBlockBoundaries) {
  FakeModelOptions o;
  o.eos_bias = 1.5f;
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(1);
  for (int32_t len : {1, 3, 4, 5, 15, 16, 17, 33, 100}) {
    const auto prompt = random_prompt(rng, len, o.vocab, o.eos);
    const auto r = t.engine->submit({prompt, greedy(40)})->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    ASSERT_EQ(r.sequences.size(), 1u);
    const auto ref = reference_generate(prompt, greedy(40), o, 0, 0, 40);
    EXPECT_EQ(r.sequences[0].output_ids, ref.ids) << "prompt length " << len;
    EXPECT_EQ(r.sequences[0].finish_reason, ref.reason);
    EXPECT_EQ(r.timings.input_len, len);
    EXPECT_EQ(r.timings.output_len, static_cast<int32_t>(ref.ids.size()));
  }
  EXPECT_EQ(t.model->violations(), 0);
  expect_all_free(*t.engine);
}

// Half greedy, half seeded sampling with every knob, as one batch and one by one.
std::vector<GenerateRequest> mixed_requests(int n, int32_t vocab, int32_t eos, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 1 + static_cast<int32_t>(rng() % 60), vocab, eos);
    r.config.max_new_tokens = 1 + static_cast<int32_t>(rng() % 40);
    if (i % 2 == 0) {
      r.config.temperature = 0.0f;
    } else {
      r.config.random_seed = rng();
      r.config.temperature = 0.5f + static_cast<float>(rng() % 10) / 10.0f;
      if (i % 3 == 0) r.config.top_k = 1 + static_cast<int32_t>(rng() % 20);
      if (i % 5 == 0) r.config.top_p = 0.8f;
      if (i % 7 == 0) r.config.min_p = 0.1f;
    }
    if (i % 4 == 1) r.config.repetition_penalty = 1.3f;
    if (i % 6 == 1) r.config.frequency_penalty = 0.4f;
    if (i % 8 == 3) r.config.no_repeat_ngram_size = 2;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

TEST(AsyncModel, BatchInvarianceGreedyAndSeeded) {
  FakeModelOptions o;
  o.eos_bias = 1.0f;
  const auto reqs = mixed_requests(64, o.vocab, o.eos, 2);
  EngineConfig c = small_engine(2048);
  c.max_num_batched_tokens = 96;  // chunked prefills mixed with decodes
  auto together = make_engine(o, c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(together.engine->submit(r));
  std::vector<GenerateResult> batched;
  for (auto& s : streams) batched.push_back(s->wait());
  EXPECT_GT(together.engine->stats().num_steps, 0);

  auto alone = make_engine(o, c);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto one = alone.engine->submit(reqs[i])->wait();
    ASSERT_FALSE(batched[i].error);
    ASSERT_FALSE(one.error);
    EXPECT_EQ(batched[i].sequences[0].output_ids, one.sequences[0].output_ids) << "request " << i;
    const auto ref = reference_generate(reqs[i].prompt_ids, reqs[i].config, o,
                                        reqs[i].config.random_seed.value_or(0), 0,
                                        *reqs[i].config.max_new_tokens);
    EXPECT_EQ(one.sequences[0].output_ids, ref.ids) << "request " << i;
  }
  EXPECT_EQ(together.model->violations(), 0);
  EXPECT_EQ(alone.model->violations(), 0);
  expect_all_free(*together.engine);
}

TEST(AsyncModel, PreemptionUnderATinyCacheKeepsTheOutputs) {
  FakeModelOptions o;
  const auto reqs = mixed_requests(32, o.vocab, o.eos, 3);
  auto run = [&](int32_t blocks) {
    auto t = make_engine(o, small_engine(blocks));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(t.engine->submit(r));
    std::vector<std::vector<int32_t>> out;
    for (auto& s : streams) {
      auto r = s->wait();
      EXPECT_FALSE(r.error) << r.error->message;
      out.push_back(r.sequences.at(0).output_ids);
    }
    EXPECT_EQ(t.model->violations(), 0);
    expect_all_free(*t.engine);
    return std::make_pair(out, t.engine->stats().num_preemptions);
  };
  const auto [ample, ample_preemptions] = run(4096);
  // The longest request needs 60 + 40 tokens: 25 blocks of 4.
  const auto [tiny, tiny_preemptions] = run(26);
  EXPECT_EQ(ample_preemptions, 0);
  EXPECT_GT(tiny_preemptions, 0);
  EXPECT_EQ(tiny, ample);
}

// Prefix-LM prompts (ChatGLM-6B): the model's layout of each prompt reaches every step,
// and a bidirectional context is computed in one step (chunked prefill around it, and
// again when a preempted request recomputes); prompts the model refuses and contexts
// longer than a step fail at submit.
TEST(AsyncModel, BidirectionalContextsAreComputedWhole) {
  FakeModelOptions o;
  o.layout_token = 7;
  std::mt19937 rng(5);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 1 + static_cast<int32_t>(rng() % 30), o.vocab, 7);
    r.prompt_ids.push_back(7);
    for (int32_t k = static_cast<int32_t>(rng() % 12); k > 0; --k)
      r.prompt_ids.push_back(static_cast<int32_t>(rng() % o.vocab));
    r.config = greedy(1 + static_cast<int32_t>(rng() % 20));
    reqs.push_back(std::move(r));
  }
  auto run = [&](int32_t blocks) {
    EngineConfig c = small_engine(blocks);
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 32;
    auto t = make_engine(o, c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(t.engine->submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto r = streams[i]->wait();
      EXPECT_FALSE(r.error) << r.error->message;
      if (r.error) continue;
      const auto ref = reference_generate(reqs[i].prompt_ids, reqs[i].config, o, 0, 0,
                                          *reqs[i].config.max_new_tokens);
      EXPECT_EQ(r.sequences[0].output_ids, ref.ids) << "request " << i;
    }
    EXPECT_EQ(t.model->violations(), 0);
    EXPECT_GE(t.model->context_steps(), static_cast<int64_t>(reqs.size()));
    expect_all_free(*t.engine);
    return t.engine->stats().num_preemptions;
  };
  EXPECT_EQ(run(2048), 0);
  // The longest request needs 31 + 11 + 20 tokens: 16 blocks of 4.
  EXPECT_GT(run(17), 0);

  EngineConfig c = small_engine(64);
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 32;
  auto t = make_engine(o, c);
  try {
    t.engine->submit({{1, 2, 3}, greedy(2)});
    ADD_FAILURE() << "a prompt without its context end was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("no context end token 7"));
  }
  std::vector<int32_t> long_context(40, 3);
  long_context.push_back(7);
  try {
    t.engine->submit({long_context, greedy(2)});
    ADD_FAILURE() << "a context longer than a step was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("bidirectional context of 40 tokens"));
  }
}

TEST(AsyncModel, CancellationFreesBlocksAtOnce) {
  FakeModelOptions o;
  o.delay_us = 300;
  auto t = make_engine(o, small_engine(256));
  std::mt19937 rng(4);
  GenerateConfig c = greedy(400);
  c.ignore_eos = true;
  auto s = t.engine->submit({random_prompt(rng, 20, o.vocab), c});
  int tokens = 0;
  while (tokens < 5) {
    auto e = s->next(std::chrono::seconds(10));
    ASSERT_TRUE(e.has_value());
    tokens += static_cast<int>(e->token_ids.size());
  }
  EXPECT_LT(t.engine->stats().num_free_blocks, 256);
  s->cancel();
  const auto r = s->wait();
  ASSERT_EQ(r.sequences.size(), 1u);
  EXPECT_EQ(r.sequences[0].finish_reason, FinishReason::kCancelled);
  EXPECT_LT(r.sequences[0].output_ids.size(), 400u);
  expect_all_free(*t.engine);  // already when the final event arrives
  // Cancelling twice, or after the end, is harmless.
  s->cancel();
  // A request cancelled before it ever ran.
  auto s2 = t.engine->submit({random_prompt(rng, 20, o.vocab), c});
  s2->cancel();
  EXPECT_EQ(s2->wait().sequences.at(0).finish_reason, FinishReason::kCancelled);
  expect_all_free(*t.engine);
}

TEST(AsyncModel, ParallelSamplesShareThePromptAndMatchTheReference) {
  FakeModelOptions o;
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(5);
  const auto prompt = random_prompt(rng, 18, o.vocab, o.eos);  // ends mid-block
  GenerateConfig c;
  c.num_return_sequences = 4;
  c.random_seed = 77;
  c.max_new_tokens = 25;
  const auto r = t.engine->submit({prompt, c})->wait();
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.sequences.size(), 4u);
  for (int32_t i = 0; i < 4; ++i) {
    const auto ref = reference_generate(prompt, c, o, 77, i, 25);
    EXPECT_EQ(r.sequences[static_cast<size_t>(i)].output_ids, ref.ids) << "sequence " << i;
  }
  EXPECT_NE(r.sequences[0].output_ids, r.sequences[1].output_ids);
  EXPECT_GT(t.model->copies(), 0);  // the shared last block was copied on write
  EXPECT_EQ(t.model->violations(), 0);
  expect_all_free(*t.engine);
}

TEST(AsyncModel, BeamSearchMatchesTheReference) {
  FakeModelOptions o;
  o.eos_bias = 0.5f;
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(6);
  for (int32_t beams : {2, 4}) {
    for (float lp : {1.0f, 0.0f}) {
      const auto prompt = random_prompt(rng, 10, o.vocab, o.eos);
      GenerateConfig c;
      c.num_beams = beams;
      c.num_return_sequences = beams;
      c.length_penalty = lp;
      c.max_new_tokens = 12;
      c.repetition_penalty = 1.2f;
      const auto r = t.engine->submit({prompt, c})->wait();
      ASSERT_FALSE(r.error) << "[" << static_cast<int>(r.error->code) << "] " << r.error->message;
      const auto ref = testing::reference_beams(prompt, c, o, 12);
      ASSERT_EQ(r.sequences.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_EQ(r.sequences[i].output_ids, ref[i].tokens) << "beam " << i;
        EXPECT_NEAR(r.sequences[i].cum_log_prob, ref[i].sum_logprobs, 1e-9);
      }
    }
  }
  EXPECT_EQ(t.model->violations(), 0);
  expect_all_free(*t.engine);
}

TEST(AsyncModel, EosIgnoreEosAndMinNewTokens) {
  FakeModelOptions o;
  o.eos_bias = 3.0f;  // EOS is often the top token
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(7);
  int stopped = 0;
  for (int i = 0; i < 20; ++i) {
    const auto prompt = random_prompt(rng, 5, o.vocab, o.eos);
    const auto r = t.engine->submit({prompt, greedy(30)})->wait();
    const auto ref = reference_generate(prompt, greedy(30), o, 0, 0, 30);
    EXPECT_EQ(r.sequences[0].output_ids, ref.ids);
    for (int32_t id : r.sequences[0].output_ids) EXPECT_NE(id, o.eos);
    stopped += r.sequences[0].finish_reason == FinishReason::kStop;

    GenerateConfig ig = greedy(30);
    ig.ignore_eos = true;
    const auto ri = t.engine->submit({prompt, ig})->wait();
    EXPECT_EQ(ri.sequences[0].output_ids.size(), 30u);
    EXPECT_EQ(ri.sequences[0].finish_reason, FinishReason::kLength);

    GenerateConfig mn = greedy(30);
    mn.min_new_tokens = 12;
    const auto rm = t.engine->submit({prompt, mn})->wait();
    EXPECT_GE(rm.sequences[0].output_ids.size(), 12u);
    EXPECT_EQ(rm.sequences[0].output_ids, reference_generate(prompt, mn, o, 0, 0, 30).ids);
  }
  EXPECT_GT(stopped, 5);
}

TEST(AsyncModel, StopWordsList) {
  FakeModelOptions o;
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(8);
  const auto prompt = random_prompt(rng, 7, o.vocab, o.eos);
  GenerateConfig c = greedy(40);
  c.ignore_eos = true;
  const auto full = t.engine->submit({prompt, c})->wait().sequences[0].output_ids;
  ASSERT_EQ(full.size(), 40u);
  // The first place where the pair at 10..11 occurs.
  const std::vector<int32_t> pair = {full[10], full[11]};
  size_t at = 0;
  while (!(full[at] == pair[0] && full[at + 1] == pair[1])) ++at;
  c.stop_words_list = {{1000 % o.vocab, 999 % o.vocab, 3}, pair};
  const auto r = t.engine->submit({prompt, c})->wait();
  EXPECT_EQ(r.sequences[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.sequences[0].output_ids, std::vector<int32_t>(full.begin(), full.begin() + at + 2));
}

// A model that computes the step inside launch() (the CPU) spends the forward pass
// there: the engine's report counts it as the forward pass, not as its own overhead.
TEST(AsyncModel, StepTimeGoesToThePhaseThatSpentIt) {
  FakeModelOptions o;
  o.delay_us = 20000;  // each forward pass sleeps 20 ms
  auto t = make_engine(o, small_engine(512));
  GenerateConfig c;
  c.max_new_tokens = 6;
  c.ignore_eos = true;
  ASSERT_FALSE(t.engine->submit({{1, 2, 3}, c})->wait().error.has_value());
  const EngineStats s = t.engine->stats();
  ASSERT_GE(s.num_steps, 6);
  EXPECT_GE(s.forward_ms, 0.9 * 20.0 * static_cast<double>(s.num_steps)) << s.forward_ms;
  EXPECT_LT(s.schedule_ms, 0.5 * s.forward_ms) << s.schedule_ms;
}

TEST(AsyncModel, LogprobsAndTimings) {
  FakeModelOptions o;
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(10);
  const auto prompt = random_prompt(rng, 9, o.vocab, o.eos);
  GenerateConfig c;
  c.random_seed = 5;
  c.max_new_tokens = 20;
  c.return_logprobs = true;
  c.top_logprobs = 3;
  const auto r = t.engine->submit({prompt, c})->wait();
  const auto ref = reference_generate(prompt, c, o, 5, 0, 20);
  const auto& s = r.sequences[0];
  ASSERT_EQ(s.output_ids, ref.ids);
  ASSERT_EQ(s.logprobs.size(), ref.ids.size());
  double cum = 0;
  for (size_t i = 0; i < ref.ids.size(); ++i) {
    EXPECT_FLOAT_EQ(s.logprobs[i], ref.logprobs[i]);
    ASSERT_EQ(s.top_logprobs[i].size(), 3u);
    EXPECT_GE(s.top_logprobs[i][0].logprob, s.top_logprobs[i][1].logprob);
    EXPECT_GE(s.top_logprobs[i][0].logprob, s.logprobs[i]);
    cum += s.logprobs[i];
  }
  EXPECT_NEAR(s.cum_log_prob, cum, 1e-6);
  EXPECT_EQ(r.timings.input_len, 9);
  EXPECT_EQ(r.timings.output_len, static_cast<int32_t>(ref.ids.size()));
  EXPECT_GE(r.timings.iter_count, static_cast<int32_t>(ref.ids.size()));
  EXPECT_LE(r.timings.queue_ms, r.timings.first_token_ms);
  EXPECT_LE(r.timings.first_token_ms, r.timings.total_ms);
  EXPECT_EQ(r.timings.token_gaps_ms.size() + 1,
            ref.ids.size() + (ref.reason == FinishReason::kStop));
}

// cum_log_prob of sampled and greedy output, without return_logprobs: the sum over the
// output tokens of log-softmax(processed logits / temperature) (temperature 1 when
// greedy), recomputed here from the model's logits in double precision.
TEST(AsyncModel, CumLogProbIsTheDrawnTokensLogSoftmax) {
  FakeModelOptions o;
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(12);
  const auto prompt = random_prompt(rng, 7, o.vocab, o.eos);
  for (const bool greedy : {false, true}) {
    GenerateConfig c;
    c.random_seed = 9;
    c.max_new_tokens = 16;
    c.temperature = greedy ? 0.0f : 0.7f;
    c.top_k = greedy ? 0 : 8;
    c.repetition_penalty = 1.3f;
    c.logit_bias = {{5, 1.5f}};
    const auto r = t.engine->submit({prompt, c})->wait();
    ASSERT_FALSE(r.error.has_value());
    const auto& s = r.sequences[0];
    ASSERT_FALSE(s.output_ids.empty());
    std::vector<int32_t> tokens = prompt;
    std::vector<float> logits(static_cast<size_t>(o.vocab));
    const std::vector<int32_t> eos = {o.eos};
    const double inv_t = greedy ? 1.0 : 1.0 / c.temperature;
    double want = 0.0;
    for (const int32_t id : s.output_ids) {
      testing::FakeModel::reference_logits(tokens, o, logits.data());
      SamplingContext ctx;
      ctx.config = &c;
      ctx.tokens = tokens;
      ctx.prompt_len = static_cast<int32_t>(prompt.size());
      ctx.eos_ids = eos;
      process_logits(logits.data(), o.vocab, ctx);
      const double m = *std::max_element(logits.begin(), logits.end());
      double sum = 0.0;
      for (const float x : logits) sum += std::exp((x - m) * inv_t);
      want += (logits[static_cast<size_t>(id)] - m) * inv_t - std::log(sum);
      tokens.push_back(id);
    }
    EXPECT_LT(want, -0.1) << "a test that cannot tell 0 from the sum";
    EXPECT_NEAR(s.cum_log_prob, want, 1e-4 * static_cast<double>(s.output_ids.size()))
        << (greedy ? "greedy" : "sampled");
  }
}

}  // namespace
}  // namespace tachyon

namespace tachyon {
namespace {

// Requests on LoRA adapters: each step names every sequence's adapter, at most the
// model's resident adapters at once; an adapter not registered (or removed) is refused
// at submission.
TEST(AsyncModel, RequestsRunWithTheirAdapters) {
  FakeModelOptions o;
  o.max_adapters = 2;
  auto t = testing::make_engine(o, testing::small_engine(1024));
  for (int32_t id : {5, 6, 7}) t.engine->add_adapter(id, std::make_shared<PreparedAdapter>());
  EXPECT_THROW(t.engine->add_adapter(6, std::make_shared<PreparedAdapter>()), InvalidArgument);
  // Prompts whose first token tells the adapter: 10 + adapter.
  std::vector<std::shared_ptr<RequestStream>> streams;
  const std::vector<int32_t> adapters = {5, 0, 6, 7, 5, 7, 0, 6};
  for (int32_t a : adapters) {
    GenerateRequest r{{10 + a, 3, 4, 5}, testing::greedy(8)};
    r.adapter = a;
    streams.push_back(t.engine->submit(std::move(r)));
  }
  for (auto& s : streams) EXPECT_FALSE(s->wait().error);
  EXPECT_EQ(t.model->violations(), 0);
  ASSERT_FALSE(t.model->adapter_log().empty());
  for (const auto& [token, adapter] : t.model->adapter_log())
    if (token >= 10 && token <= 17) {
      EXPECT_EQ(adapter, token - 10);
    }
  // Forked sequences (n > 1, beams) run their request's adapter.
  GenerateRequest sampled{{15, 3, 4}, testing::greedy(6)};
  sampled.config.temperature = 1.0f;
  sampled.config.num_return_sequences = 3;
  sampled.adapter = 5;
  GenerateRequest beams{{16, 3, 4}, testing::greedy(6)};
  beams.config.num_beams = 2;
  beams.config.num_return_sequences = 2;
  beams.adapter = 6;
  auto s1 = t.engine->submit(sampled), s2 = t.engine->submit(beams);
  const GenerateResult r1 = s1->wait(), r2 = s2->wait();
  EXPECT_FALSE(r1.error);
  EXPECT_FALSE(r2.error);
  EXPECT_EQ(r1.sequences.size(), 3u);
  EXPECT_EQ(r2.sequences.size(), 2u);
  EXPECT_EQ(t.model->violations(), 0);
  GenerateRequest bad{{1, 2}, testing::greedy(2)};
  bad.adapter = 9;
  EXPECT_THROW(t.engine->submit(bad), InvalidArgument);
  t.engine->remove_adapter(6);
  bad.adapter = 6;
  EXPECT_THROW(t.engine->submit(bad), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
