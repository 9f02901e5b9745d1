// A KV cache reserved in chunks and grown on demand (EngineConfig::kv_grow_blocks):
// the block pool's growth, an engine that grows instead of preempting while below its
// limit (and keeps every block's contents: the fake model checks them), the start log
// line, and the host default sizing (size_host_kv_cache).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/logging.h"
#include "engine/block_pool.h"
#include "engine/kv_sizing.h"
#include "engine_test_util.h"

namespace tachyon::testing {
namespace {

TEST(KvGrowth, BlockPoolGrowsWithNewBlocksFirstAndKeepsTheRest) {
  BlockPool p(4);
  const int32_t a = p.allocate(), b = p.allocate();
  p.release(a);  // free list: 2, 3, a
  p.grow(7);
  EXPECT_EQ(p.num_blocks(), 7);
  EXPECT_EQ(p.num_free(), 6);
  EXPECT_EQ(p.ref_count(b), 1);
  EXPECT_EQ(p.free_list(), (std::vector<int32_t>{4, 5, 6, 2, 3, a}));
  std::vector<int32_t> got;
  ASSERT_TRUE(p.allocate(6, &got));
  EXPECT_EQ(got, (std::vector<int32_t>{4, 5, 6, 2, 3, a}));
  EXPECT_EQ(p.allocate(), -1);
  p.grow(8);  // from an empty free list
  EXPECT_EQ(p.allocate(), 7);
  p.release(7);
  p.release(b);
  EXPECT_EQ(p.free_list(), (std::vector<int32_t>{7, b}));
  p.grow(8);  // no change
  EXPECT_EQ(p.num_blocks(), 8);
  EXPECT_THROW(p.grow(5), Internal);
  EXPECT_EQ(p.num_blocks(), 8);
}

EngineConfig growing_engine(int32_t limit, int32_t chunk) {
  EngineConfig c = small_engine(limit);
  c.kv_grow_blocks = chunk;
  return c;
}

TEST(KvGrowth, LongGenerationGrowsTheCacheWithoutPreemption) {
  FakeModelOptions o;
  o.can_grow = true;
  auto t = make_engine(o, growing_engine(/*limit=*/200, /*chunk=*/4));
  EXPECT_EQ(t.model->num_blocks(), 4);
  EXPECT_EQ(t.engine->stats().num_kv_blocks, 4);
  EXPECT_EQ(t.engine->stats().max_kv_blocks, 200);
  std::mt19937 rng(3);
  const auto prompt = random_prompt(rng, 30, o.vocab, o.eos);
  GenerateConfig c = greedy(120);
  c.ignore_eos = true;
  const auto r = t.engine->submit({prompt, c})->wait();
  ASSERT_FALSE(r.error) << r.error->message;
  // 150 tokens: 38 blocks of 4, far beyond the first chunk.
  EXPECT_EQ(r.sequences.at(0).output_ids, reference_greedy(prompt, o, 120, false));
  const EngineStats s = t.engine->stats();
  EXPECT_EQ(s.num_preemptions, 0);
  EXPECT_GE(s.num_kv_blocks, 38);
  EXPECT_LE(s.num_kv_blocks, 40);  // grown by chunks of 4 as needed, not to the limit
  EXPECT_EQ(s.num_kv_blocks, t.model->num_blocks());
  EXPECT_GT(s.num_kv_grows, 0);
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
  EXPECT_EQ(t.model->violations(), 0);
}

TEST(KvGrowth, ManyRequestsGrowToTheLimitThenPreemptAndKeepTheOutputs) {
  FakeModelOptions o;
  o.can_grow = true;
  std::mt19937 rng(5);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 1 + static_cast<int32_t>(rng() % 50), o.vocab, o.eos);
    r.config = greedy(1 + static_cast<int32_t>(rng() % 40));
    reqs.push_back(r);
  }
  auto run = [&](const EngineConfig& c) {
    auto t = make_engine(o, c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(t.engine->submit(r));
    std::vector<std::vector<int32_t>> out;
    for (auto& s : streams) {
      const auto r = s->wait();
      EXPECT_FALSE(r.error) << r.error->message;
      out.push_back(r.sequences.at(0).output_ids);
    }
    EXPECT_EQ(t.model->violations(), 0);
    const EngineStats s = t.engine->stats();
    EXPECT_EQ(s.num_kv_blocks, t.model->num_blocks());
    return std::make_pair(out, s);
  };
  const auto [fixed, fixed_stats] = run(small_engine(4096));
  const auto [ample, ample_stats] = run(growing_engine(4096, 8));
  EXPECT_EQ(ample, fixed);
  EXPECT_EQ(ample_stats.num_preemptions, 0);
  EXPECT_LT(ample_stats.num_kv_blocks, 4096);
  // A limit of 26 blocks: grown to it, then preempting.
  const auto [tight, tight_stats] = run(growing_engine(26, 8));
  EXPECT_EQ(tight, fixed);
  EXPECT_EQ(tight_stats.num_kv_blocks, 26);
  EXPECT_GT(tight_stats.num_preemptions, 0);
}

TEST(KvGrowth, AModelThatCannotGrowReservesEverything) {
  FakeModelOptions o;  // can_grow false (as on a GPU)
  auto t = make_engine(o, growing_engine(100, 4));
  EXPECT_EQ(t.model->num_blocks(), 100);
  EXPECT_EQ(t.engine->stats().num_kv_blocks, 100);
}

TEST(KvGrowth, StartLogSaysWhatIsReservedAndTheLimit) {
  FakeModelOptions o;
  o.can_grow = true;
  const LogLevel before = log_level();
  set_log_level(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  { auto t = make_engine(o, growing_engine(64, 8)); }
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_level(before);
  // 64 bytes a token (FakeModel), 4 tokens a block.
  EXPECT_NE(err.find("KV cache of 8 blocks of 4 tokens reserved (0.0 MiB), limit 64 blocks"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("grown by 8 blocks on demand"), std::string::npos) << err;
}

TEST(KvGrowth, HostDefaultSizing) {
  FakeModelOptions o;  // 512 tokens of context, 64 bytes a token
  FakeModel m(o);
  EngineConfig c;
  c.block_size = 16;
  c.max_num_seqs = 10;
  size_host_kv_cache(&c, m, int64_t{1} << 40);
  EXPECT_EQ(c.kv_cache_bytes, 10 * 512 * 64);  // every sequence at full length
  EXPECT_EQ(c.kv_grow_blocks, 32);             // one full-length sequence at a time
  EngineConfig capped;
  capped.block_size = 16;
  capped.max_num_seqs = 10;
  capped.kv_cache_bytes = 40000;  // --kv-cache-mb below that: it caps
  size_host_kv_cache(&capped, m, int64_t{1} << 40);
  EXPECT_EQ(capped.kv_cache_bytes, 40000);
  EngineConfig by_memory;
  by_memory.block_size = 16;
  by_memory.max_num_seqs = 10;
  size_host_kv_cache(&by_memory, m, 5 * 50000);  // a fifth of free memory caps
  EXPECT_EQ(by_memory.kv_cache_bytes, 50000);
  EngineConfig explicit_blocks;
  explicit_blocks.num_kv_blocks = 7;
  size_host_kv_cache(&explicit_blocks, m, int64_t{1} << 40);
  EXPECT_EQ(explicit_blocks.kv_cache_bytes, 0);
  EXPECT_EQ(explicit_blocks.kv_grow_blocks, 0);
}

}  // namespace
}  // namespace tachyon::testing
