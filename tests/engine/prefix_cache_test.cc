// The prefix cache in the block books (KVCacheManager): publishing, matching, eviction
// order, pinning, the host tier, and a model of the blocks' contents under random
// workloads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/block_pool.h"

namespace tachyon {
namespace {

using ::testing::ElementsAre;

const BlockHashKey kKey{1, 2};

std::vector<int32_t> iota_tokens(int32_t n, int32_t from = 100) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(from + i);
  return t;
}

// Writes, hashes and publishes `tokens` as sequence `seq`'s computed tokens.
void compute(KVCacheManager& kv, int64_t seq, const std::vector<int32_t>& tokens,
             uint64_t salt = 0) {
  std::vector<BlockCopy> copies;
  const auto n = static_cast<int32_t>(tokens.size());
  ASSERT_TRUE(kv.prepare_write(seq, 0, n, &copies));
  kv.hash_tokens(seq, tokens, salt);
  kv.publish(seq, n);
}

TEST(BlockHash, DependsOnTokensParentAndSalt) {
  const auto a = iota_tokens(4);
  auto b = a;
  b[3] = 7;
  const BlockHash h = hash_block(kKey, {}, a, 0);
  EXPECT_EQ(h, hash_block(kKey, {}, a, 0));
  EXPECT_NE(h, hash_block(kKey, {}, b, 0));
  EXPECT_NE(h, hash_block(kKey, {}, a, 1));
  EXPECT_NE(h, hash_block(kKey, h, a, 0));
  EXPECT_NE(h, hash_block(BlockHashKey{1, 3}, {}, a, 0));
}

TEST(PrefixCache, ANewSequenceTakesThePublishedFullBlocks) {
  KVCacheManager kv(8, 4);
  kv.enable_prefix_cache(0, kKey);
  compute(kv, 1, iota_tokens(10));  // blocks 0 1 full, block 2 partial
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  const auto& t1 = kv.block_table(1);

  auto prompt = iota_tokens(12);
  kv.hash_tokens(2, prompt, 0);
  EXPECT_EQ(kv.match_prefix(2, 2), 2);
  EXPECT_THAT(kv.block_table(2), ElementsAre(t1[0], t1[1]));
  EXPECT_EQ(kv.pool().ref_count(t1[0]), 2);
  // At most max_blocks, and only as far as the tokens agree.
  kv.hash_tokens(3, prompt, 0);
  EXPECT_EQ(kv.match_prefix(3, 1), 1);
  auto other = iota_tokens(12);
  other[5] = 1;
  kv.hash_tokens(4, other, 0);
  EXPECT_EQ(kv.match_prefix(4, 3), 1);
  kv.hash_tokens(5, prompt, /*salt=*/9);
  EXPECT_EQ(kv.match_prefix(5, 3), 0);
  EXPECT_FALSE(kv.has(5));
}

TEST(PrefixCache, FreedBlocksStayCachedAndTheLeastRecentlyFreedIsEvictedLast) {
  KVCacheManager kv(4, 4);
  kv.enable_prefix_cache(0, kKey);
  compute(kv, 1, iota_tokens(8));
  const std::vector<int32_t> t1 = kv.block_table(1);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(kv.num_free_uncached(), 2);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  // Uncached blocks go first.
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.prepare_write(2, 0, 8, &copies));
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  // Then the cached block freed first: the sequence's last (its first block is freed
  // last, so the head of a prefix outlives its tail).
  ASSERT_TRUE(kv.prepare_write(2, 8, 12, &copies));
  EXPECT_EQ(kv.block_table(2)[2], t1[1]);
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  kv.hash_tokens(3, iota_tokens(12), 0);
  EXPECT_EQ(kv.match_prefix(3, 2), 1);
  EXPECT_THAT(kv.block_table(3), ElementsAre(t1[0]));
  EXPECT_EQ(kv.num_free_blocks(), 0);
}

TEST(PrefixCache, ADuplicateBlockStaysOutOfTheIndex) {
  KVCacheManager kv(8, 4);
  kv.enable_prefix_cache(0, kKey);
  compute(kv, 1, iota_tokens(8));
  compute(kv, 2, iota_tokens(8));  // computed alongside, not taken from the cache
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  for (int32_t b : kv.block_table(2)) EXPECT_FALSE(kv.is_cached(b));
  kv.free(2);
  EXPECT_EQ(kv.num_free_uncached(), 6);
}

TEST(PrefixCache, PinnedBlocksAreNeverEvicted) {
  KVCacheManager kv(4, 4);
  kv.enable_prefix_cache(0, kKey);
  compute(kv, 1, iota_tokens(10));
  EXPECT_EQ(kv.pin(1), 2);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 2);
  EXPECT_EQ(kv.num_pinned_blocks(), 2);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.prepare_write(2, 0, 8, &copies));
  EXPECT_FALSE(kv.prepare_write(2, 8, 9, &copies));
  kv.hash_tokens(3, iota_tokens(9), 0);
  EXPECT_EQ(kv.match_prefix(3, 2), 2);
}

TEST(PrefixCache, EvictedBlocksGoToTheHostTierAndComeBack) {
  KVCacheManager kv(2, 4, /*num_swap_blocks=*/1);
  kv.enable_prefix_cache(/*host_blocks=*/3, kKey);
  EXPECT_EQ(kv.num_host_blocks(), 3);
  compute(kv, 1, iota_tokens(8));
  const std::vector<int32_t> t1 = kv.block_table(1);
  kv.free(1);
  std::vector<BlockCopy> copies, out, in;
  ASSERT_TRUE(kv.prepare_write(2, 0, 8, &copies));  // evicts both
  kv.take_moves(&out, &in);
  // Host slots follow the swap space's block: swap ids 1, 2.
  EXPECT_THAT(out, ElementsAre(BlockCopy{t1[1], 1}, BlockCopy{t1[0], 2}));
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(kv.num_cached_blocks(), 0);
  EXPECT_EQ(kv.num_host_cached_blocks(), 2);
  kv.free(2);
  out.clear();
  kv.hash_tokens(3, iota_tokens(9), 0);
  EXPECT_EQ(kv.match_prefix(3, 2), 2);
  kv.take_moves(&out, &in);
  EXPECT_TRUE(out.empty());
  const auto& t3 = kv.block_table(3);
  EXPECT_THAT(in, ElementsAre(BlockCopy{2, t3[0]}, BlockCopy{1, t3[1]}));
  EXPECT_EQ(kv.host_hit_blocks(), 2);
  EXPECT_EQ(kv.num_cached_blocks(), 2);  // back in the index
}

// A model of what every block holds (the hash of the K/V written there), checked
// against the books after every operation of a random workload: a sequence must only
// ever be given blocks that hold its own prefix, wherever they come from.
class ContentModel {
 public:
  ContentModel(int32_t blocks, int32_t swap, int32_t host)
      : cache_(static_cast<size_t>(blocks)), host_(static_cast<size_t>(swap + host)) {}
  void grow(int32_t blocks) { cache_.resize(static_cast<size_t>(blocks)); }
  void apply_moves(const std::vector<BlockCopy>& out, const std::vector<BlockCopy>& in) {
    for (const auto& m : out) host_.at(static_cast<size_t>(m.dst)) = cache_.at(m.src);
    for (const auto& m : in) cache_.at(static_cast<size_t>(m.dst)) = host_.at(m.src);
  }
  void apply_copies(const std::vector<BlockCopy>& copies) {
    for (const auto& c : copies) cache_.at(static_cast<size_t>(c.dst)) = cache_.at(c.src);
  }
  void write(int32_t block, BlockHash h) { cache_.at(static_cast<size_t>(block)) = h; }
  const BlockHash& at(int32_t block) const { return cache_.at(static_cast<size_t>(block)); }

 private:
  std::vector<BlockHash> cache_, host_;
};

TEST(PrefixCache, RandomWorkloadsKeepTheBooksAndTheContentsRight) {
  constexpr int32_t kBs = 4;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const int32_t blocks = 12 + static_cast<int32_t>(rng() % 12);
    const int32_t swap = seed % 3 == 0 ? 4 : 0;
    const int32_t host = seed % 2 == 0 ? 6 : 0;
    KVCacheManager kv(blocks, kBs, swap);
    kv.enable_prefix_cache(host, kKey);
    ContentModel content(blocks, swap, host);
    // A few shared prefixes, so that sequences meet in the cache.
    std::vector<std::vector<int32_t>> stems;
    for (int i = 0; i < 3; ++i)
      stems.push_back(iota_tokens(4 + static_cast<int32_t>(rng() % 14), 1000 * i));
    std::map<int64_t, std::vector<int32_t>> live;  // sequence -> its tokens (all computed)
    std::map<int64_t, std::vector<int32_t>> swapped;
    std::set<int32_t> pinned;
    int64_t next = 1;
    int64_t hits = 0;
    auto chain_of = [&](const std::vector<int32_t>& t) {
      std::vector<BlockHash> c;
      for (size_t i = 0; i + kBs <= t.size(); i += kBs)
        c.push_back(
            hash_block(kKey, c.empty() ? BlockHash{} : c.back(), std::span(t).subspan(i, kBs), 0));
      return c;
    };
    for (int op = 0; op < 600; ++op) {
      std::vector<BlockCopy> copies, out, in;
      const uint32_t what = rng() % 10;
      if (what < 4 || live.empty()) {  // a new sequence: cached prefix, then the rest
        std::vector<int32_t> t = stems[rng() % stems.size()];
        const int32_t extra = static_cast<int32_t>(rng() % 9);
        for (int32_t i = 0; i < extra; ++i) t.push_back(static_cast<int32_t>(rng() % 5));
        const int64_t s = next++;
        kv.hash_tokens(s, t, 0);
        const int32_t matched = kv.match_prefix(s, (static_cast<int32_t>(t.size()) - 1) / kBs);
        hits += matched;
        const auto n = static_cast<int32_t>(t.size());
        if (!kv.prepare_write(s, matched * kBs, n, &copies)) {
          kv.free(s);
          kv.forget(s);
        } else {
          live[s] = t;
        }
      } else if (what < 7) {  // a sequence grows by a few tokens
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        const int32_t from = static_cast<int32_t>(it->second.size());
        const int32_t more = 1 + static_cast<int32_t>(rng() % 6);
        if (kv.prepare_write(it->first, from, from + more, &copies))
          for (int32_t i = 0; i < more; ++i) it->second.push_back(static_cast<int32_t>(rng() % 5));
      } else if (what < 8) {  // fork
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        const int64_t s = next++;
        kv.fork(it->first, s);
        live[s] = it->second;
      } else if (what < 9 || pinned.size() > 3) {  // end, or swap out
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        if (rng() % 2 && kv.swap_out(it->first, &out)) {
          swapped[it->first] = it->second;
        } else {
          kv.free(it->first);
          kv.forget(it->first);
        }
        live.erase(it);
      } else {  // pin one
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        kv.hash_tokens(it->first, it->second, 0);
        kv.publish(it->first, static_cast<int32_t>(it->second.size()));
        kv.pin(it->first);
        for (int32_t b : kv.block_table(it->first))
          if (kv.is_cached(b)) pinned.insert(b);
      }
      if (!swapped.empty() && rng() % 3 == 0 && kv.swap_in(swapped.begin()->first, &in)) {
        live.insert(*swapped.begin());
        swapped.erase(swapped.begin());
      }
      kv.take_moves(&out, &in);
      content.apply_moves(out, in);
      content.apply_copies(copies);
      // What every live sequence wrote is in its blocks; its full blocks are offered.
      for (auto& [s, t] : live) {
        const auto chain = chain_of(t);
        const auto& table = kv.block_table(s);
        for (size_t i = 0; i < chain.size(); ++i) {
          if (!kv.is_cached(table[i])) content.write(table[i], chain[i]);
          ASSERT_EQ(content.at(table[i]), chain[i])
              << "seed " << seed << " op " << op << " seq " << s << " block " << i;
        }
        kv.hash_tokens(s, t, 0);
        kv.publish(s, static_cast<int32_t>(t.size()));
      }
      // The books: every block is free or held by as many references as tables and pins.
      std::map<int32_t, int32_t> refs;
      for (auto& [s, t] : live)
        for (int32_t b : kv.block_table(s)) ++refs[b];
      std::map<int32_t, int32_t> pins;
      for (int32_t b : pinned) pins[b] = 0;
      int32_t free_uncached = 0;
      const auto free_list = kv.pool().free_list();
      const std::set<int32_t> free_set(free_list.begin(), free_list.end());
      for (int32_t b = 0; b < kv.num_blocks(); ++b) {
        const int32_t r = kv.pool().ref_count(b);
        ASSERT_GE(r, 0);
        ASSERT_EQ(r == 0, free_set.count(b) == 1) << "block " << b;
        if (!pinned.count(b)) {
          ASSERT_EQ(r, refs[b]) << "seed " << seed << " op " << op << " block " << b;
        } else {
          ASSERT_GT(r, refs[b]) << "a pinned block lost its pin";
          ASSERT_TRUE(kv.is_cached(b)) << "a pinned block was evicted";
        }
        if (r == 0 && !kv.is_cached(b)) ++free_uncached;
      }
      ASSERT_EQ(kv.num_free_uncached(), free_uncached);
    }
    EXPECT_GT(hits, 0) << "seed " << seed << ": the workload never hit the cache";
  }
}

}  // namespace
}  // namespace tachyon
