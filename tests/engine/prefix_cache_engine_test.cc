// The engine with its prefix cache: requests reuse the blocks of earlier ones and
// produce what they produce without it (the fake model reads every token back through
// the block tables, so a wrong block changes the output and counts as a violation),
// under eviction, preemption, swapping, the host tier and growth; pinned prompts;
// models whose K/V cannot be shared.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine_test_util.h"

namespace tachyon::testing {
namespace {

EngineConfig cached_engine(int32_t blocks, int32_t block_size = 4) {
  EngineConfig c = small_engine(blocks, block_size);
  c.prefix_caching = true;
  return c;
}

GenerateResult run_one(AsyncModel& engine, std::vector<int32_t> prompt, GenerateConfig cfg) {
  return engine.submit({std::move(prompt), std::move(cfg)})->wait();
}

TEST(PrefixCacheEngine, ASecondRequestReusesTheFirstOnesBlocks) {
  FakeModelOptions o;
  auto t = make_engine(o, cached_engine(64));
  std::mt19937 rng(1);
  const auto prompt = random_prompt(rng, 30, o.vocab, o.eos);
  const auto first = run_one(*t.engine, prompt, greedy(6));
  ASSERT_FALSE(first.error) << first.error->message;
  EXPECT_EQ(first.timings.reuse_len, 0);
  const int64_t computed = t.engine->stats().tokens_computed;
  const auto second = run_one(*t.engine, prompt, greedy(6));
  ASSERT_FALSE(second.error) << second.error->message;
  // Seven whole blocks; the last prompt token is computed for its logits.
  EXPECT_EQ(second.timings.reuse_len, 28);
  EXPECT_EQ(second.sequences.at(0).output_ids, first.sequences.at(0).output_ids);
  EXPECT_EQ(first.sequences.at(0).output_ids, reference_greedy(prompt, o, 6, true));
  const EngineStats s = t.engine->stats();
  EXPECT_EQ(s.tokens_computed - computed, computed - 28);
  EXPECT_EQ(s.prefix_cache_queries, 60);
  EXPECT_EQ(s.prefix_cache_hits, 28);
  EXPECT_GT(s.num_cached_blocks, 0);
  EXPECT_EQ(t.model->violations(), 0);

  // A prompt that extends the first one's output (the next turn of a conversation)
  // reuses its generated tokens' blocks too.
  auto turn = prompt;
  for (int32_t id : first.sequences.at(0).output_ids) turn.push_back(id);
  turn.push_back(5);
  const auto third = run_one(*t.engine, turn, greedy(4));
  ASSERT_FALSE(third.error) << third.error->message;
  EXPECT_EQ(third.timings.reuse_len, 32);  // 36 tokens, of which the first 35 were computed
  EXPECT_EQ(third.sequences.at(0).output_ids, reference_greedy(turn, o, 4, true));
}

TEST(PrefixCacheEngine, OffItReusesNothingAndPinsNothing) {
  FakeModelOptions o;
  EngineConfig c = cached_engine(64);
  c.prefix_caching = false;
  auto t = make_engine(o, c);
  std::mt19937 rng(2);
  const auto prompt = random_prompt(rng, 30, o.vocab, o.eos);
  run_one(*t.engine, prompt, greedy(3));
  EXPECT_EQ(run_one(*t.engine, prompt, greedy(3)).timings.reuse_len, 0);
  EXPECT_EQ(t.engine->stats().prefix_cache_queries, 0);
  EXPECT_THROW(t.engine->pin_prefix(prompt), InvalidArgument);
}

TEST(PrefixCacheEngine, AModelWhoseKVDependsOnWhenItWasComputedSharesNothing) {
  FakeModelOptions o;
  o.prefix_reuse = PrefixReuse::kNever;
  auto t = make_engine(o, cached_engine(64));
  std::mt19937 rng(3);
  const auto prompt = random_prompt(rng, 30, o.vocab, o.eos);
  run_one(*t.engine, prompt, greedy(3));
  EXPECT_EQ(run_one(*t.engine, prompt, greedy(3)).timings.reuse_len, 0);
  EXPECT_THROW(t.engine->pin_prefix(prompt), InvalidArgument);
}

TEST(PrefixCacheEngine, FrequenciesFixedAtThePromptLengthShareOnlyBetweenEqualLengths) {
  FakeModelOptions o;
  o.prefix_reuse = PrefixReuse::kSamePromptLength;
  auto t = make_engine(o, cached_engine(64));
  std::mt19937 rng(4);
  const auto prompt = random_prompt(rng, 30, o.vocab, o.eos);
  run_one(*t.engine, prompt, greedy(3));
  auto longer = prompt;
  longer.push_back(7);
  EXPECT_EQ(run_one(*t.engine, longer, greedy(3)).timings.reuse_len, 0);
  EXPECT_EQ(run_one(*t.engine, prompt, greedy(3)).timings.reuse_len, 28);
}

TEST(PrefixCacheEngine, APinnedPromptOutlivesEvictionAndServesEveryRequestThatStartsWithIt) {
  FakeModelOptions o;
  auto t = make_engine(o, cached_engine(24));
  std::mt19937 rng(5);
  const auto system = random_prompt(rng, 22, o.vocab, o.eos);
  EXPECT_EQ(t.engine->pin_prefix(system), 20);  // five whole blocks
  EXPECT_EQ(t.engine->stats().num_pinned_blocks, 5);
  // Other traffic cycles through the rest of the cache.
  for (int i = 0; i < 6; ++i) {
    const auto r = run_one(*t.engine, random_prompt(rng, 40, o.vocab, o.eos), greedy(8));
    ASSERT_FALSE(r.error) << r.error->message;
  }
  auto prompt = system;
  for (int32_t id : random_prompt(rng, 9, o.vocab, o.eos)) prompt.push_back(id);
  const auto r = run_one(*t.engine, prompt, greedy(5));
  ASSERT_FALSE(r.error) << r.error->message;
  EXPECT_GE(r.timings.reuse_len, 20);
  EXPECT_EQ(r.sequences.at(0).output_ids, reference_greedy(prompt, o, 5, true));
  EXPECT_EQ(t.engine->stats().num_pinned_blocks, 5);
  EXPECT_EQ(t.model->violations(), 0);
  EXPECT_THROW(t.engine->pin_prefix({}), InvalidArgument);
}

TEST(PrefixCacheEngine, TheCacheGrowsBeforeItEvicts) {
  FakeModelOptions o;
  o.can_grow = true;
  EngineConfig c = cached_engine(64);
  c.kv_grow_blocks = 8;
  auto t = make_engine(o, c);
  std::mt19937 rng(6);
  const auto a = random_prompt(rng, 30, o.vocab, o.eos);
  run_one(*t.engine, a, greedy(2));
  const int32_t cached = t.engine->stats().num_cached_blocks;
  EXPECT_EQ(cached, 7);
  const auto b = run_one(*t.engine, random_prompt(rng, 30, o.vocab, o.eos), greedy(2));
  ASSERT_FALSE(b.error) << b.error->message;
  EXPECT_GT(t.engine->stats().num_kv_grows, 0);
  EXPECT_EQ(t.engine->stats().num_cached_blocks, 14);  // a's blocks kept beside b's
  EXPECT_EQ(run_one(*t.engine, a, greedy(2)).timings.reuse_len, 28);
}

// Many requests over a few shared prefixes, each workload run with the cache and
// without: the outputs (seeded samples, n > 1 and beams included) are the same, in a
// cache small enough to evict and preempt, with swap space, with a host tier, and
// growing.
TEST(PrefixCacheEngine, OutputsAreTheOutputsWithoutTheCache) {
  FakeModelOptions o;
  o.can_swap = true;
  o.can_grow = true;
  o.eos_bias = -1.0f;
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> stems;
  for (int i = 0; i < 3; ++i) stems.push_back(random_prompt(rng, 12 + 7 * i, o.vocab, o.eos));
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 40; ++i) {
    GenerateRequest r;
    r.prompt_ids = stems[rng() % stems.size()];
    for (int32_t id : random_prompt(rng, static_cast<int32_t>(rng() % 9), o.vocab, o.eos))
      r.prompt_ids.push_back(id);
    r.config = greedy(1 + static_cast<int32_t>(rng() % 24));
    if (i % 5 == 1) {
      r.config.temperature = 0.8f;
      r.config.random_seed = 100 + i;
      r.config.num_return_sequences = 2;
    }
    if (i % 7 == 3) {
      r.config.num_beams = 2;
      r.config.max_new_tokens = 6;
    }
    reqs.push_back(r);
  }
  auto run = [&](EngineConfig c) {
    auto t = make_engine(o, c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(t.engine->submit(r));
    std::vector<std::vector<std::vector<int32_t>>> out;
    int32_t reused = 0;
    for (auto& s : streams) {
      const auto r = s->wait();
      EXPECT_FALSE(r.error) << r.error->message;
      reused += r.timings.reuse_len;
      out.emplace_back();
      for (const auto& seq : r.sequences) out.back().push_back(seq.output_ids);
    }
    EXPECT_EQ(t.model->violations(), 0);
    return std::make_pair(out, reused);
  };
  EngineConfig off = small_engine(4096);
  off.prefix_caching = false;
  const auto [expected, none] = run(off);
  EXPECT_EQ(none, 0);

  EngineConfig ample = cached_engine(4096);
  EngineConfig tight = cached_engine(40);
  tight.max_num_batched_tokens = 64;
  EngineConfig swapping = tight;
  swapping.swap_space_bytes = 64 * 4 * 16;
  EngineConfig host_tier = tight;
  host_tier.prefix_cache_host_bytes = 64 * 4 * 32;
  EngineConfig growing = cached_engine(48);
  growing.kv_grow_blocks = 8;
  for (const auto& [name, c] :
       {std::pair{"ample", ample}, std::pair{"tight", tight}, std::pair{"swapping", swapping},
        std::pair{"host tier", host_tier}, std::pair{"growing", growing}}) {
    const auto [got, reused] = run(c);
    EXPECT_EQ(got, expected) << name;
    EXPECT_GT(reused, 0) << name;
  }
}

TEST(PrefixCacheEngine, TheHostTierBringsBackWhatTheDeviceEvicted) {
  FakeModelOptions o;
  o.can_swap = true;
  EngineConfig c = cached_engine(16);
  c.prefix_cache_host_bytes = 64 * 4 * 32;  // 32 blocks of the fake model's 64 B per token
  auto t = make_engine(o, c);
  EXPECT_EQ(t.engine->stats().num_host_cache_blocks, 32);
  std::mt19937 rng(8);
  const auto a = random_prompt(rng, 30, o.vocab, o.eos);
  run_one(*t.engine, a, greedy(2));
  for (int i = 0; i < 3; ++i) run_one(*t.engine, random_prompt(rng, 40, o.vocab, o.eos), greedy(2));
  const auto again = run_one(*t.engine, a, greedy(4));
  ASSERT_FALSE(again.error) << again.error->message;
  EXPECT_EQ(again.timings.reuse_len, 28);
  EXPECT_EQ(again.sequences.at(0).output_ids, reference_greedy(a, o, 4, true));
  EXPECT_GT(t.engine->stats().prefix_cache_host_hits, 0);
  EXPECT_GT(t.model->swaps(), 0);
  EXPECT_EQ(t.model->violations(), 0);
}

TEST(PrefixCacheEngine, RequestsThatArriveTogetherShareWhatTheFirstHasComputed) {
  FakeModelOptions o;
  EngineConfig c = cached_engine(256);
  c.max_num_batched_tokens = 64;  // the shared 200 tokens take several steps
  auto t = make_engine(o, c);
  std::mt19937 rng(9);
  const auto stem = random_prompt(rng, 200, o.vocab, o.eos);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(stem);
    for (int32_t id : random_prompt(rng, 5, o.vocab, o.eos)) prompts.back().push_back(id);
    streams.push_back(t.engine->submit({prompts.back(), greedy(3)}));
  }
  int32_t reused = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    const auto r = streams[i]->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    reused += r.timings.reuse_len;
    EXPECT_EQ(r.sequences.at(0).output_ids, reference_greedy(prompts[i], o, 3, true));
  }
  EXPECT_GE(reused, 5 * 64);
  EXPECT_EQ(t.model->violations(), 0);
}

}  // namespace
}  // namespace tachyon::testing
