#include "engine/block_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace tachyon {
namespace {

using ::testing::ElementsAre;

TEST(BlockPool, AllocatesLeastRecentlyFreedFirst) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_THAT(pool.free_list(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.ref_count(0), 1);
  pool.release(1);
  pool.release(0);
  // 2 and 3 were never used, then 1 was freed before 0.
  EXPECT_THAT(pool.free_list(), ElementsAre(2, 3, 1, 0));
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_THAT(pool.free_list(), ElementsAre(3, 1, 0));
}

TEST(BlockPool, ReferenceCounts) {
  BlockPool pool(2);
  const int32_t b = pool.allocate();
  pool.add_ref(b);
  pool.add_ref(b);
  EXPECT_EQ(pool.ref_count(b), 3);
  pool.release(b);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.ref_count(b), 0);
  // Misuse is an internal error, never silent corruption.
  EXPECT_THROW(pool.release(b), Internal);
  EXPECT_THROW(pool.add_ref(b), Internal);
  EXPECT_THROW(pool.ref_count(7), Internal);
}

TEST(BlockPool, AllOrNothingAndTake) {
  BlockPool pool(3);
  std::vector<int32_t> got;
  EXPECT_FALSE(pool.allocate(4, &got));
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(pool.num_free(), 3);
  pool.take(1);  // out of the middle of the free list
  EXPECT_THAT(pool.free_list(), ElementsAre(0, 2));
  EXPECT_TRUE(pool.allocate(2, &got));
  EXPECT_THAT(got, ElementsAre(0, 2));
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_THROW(pool.take(1), Internal);
}

TEST(KVCacheManager, GrowsTablesBlockByBlock) {
  KVCacheManager kv(8, 4);
  std::vector<BlockCopy> copies;
  EXPECT_EQ(kv.blocks_needed(7, 0, 6), 2);
  ASSERT_TRUE(kv.prepare_write(7, 0, 6, &copies));
  EXPECT_THAT(kv.block_table(7), ElementsAre(0, 1));
  EXPECT_EQ(kv.blocks_needed(7, 6, 8), 0);  // fits the second block
  EXPECT_EQ(kv.blocks_needed(7, 6, 9), 1);
  ASSERT_TRUE(kv.prepare_write(7, 6, 9, &copies));
  EXPECT_THAT(kv.block_table(7), ElementsAre(0, 1, 2));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(kv.num_free_blocks(), 5);
  // All or nothing.
  EXPECT_FALSE(kv.prepare_write(7, 9, 9 + 6 * 4, &copies));
  EXPECT_THAT(kv.block_table(7), ElementsAre(0, 1, 2));
  EXPECT_EQ(kv.num_free_blocks(), 5);
  kv.free(7);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  // Blocks that hold nothing cached go to the front of the free list, to be taken first.
  EXPECT_THAT(kv.pool().free_list(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(KVCacheManager, ForkSharesAndCopiesOnWrite) {
  KVCacheManager kv(8, 4);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.prepare_write(1, 0, 6, &copies));  // blocks 0 (full) and 1 (half)
  kv.fork(1, 2);
  kv.fork(1, 3);
  EXPECT_THAT(kv.block_table(2), ElementsAre(0, 1));
  EXPECT_EQ(kv.pool().ref_count(0), 3);
  EXPECT_EQ(kv.pool().ref_count(1), 3);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  // Writing position 6 of seq 2 touches the shared half block: one copy.
  EXPECT_EQ(kv.blocks_needed(2, 6, 7), 1);
  ASSERT_TRUE(kv.prepare_write(2, 6, 7, &copies));
  EXPECT_THAT(copies, ElementsAre(BlockCopy{1, 2}));
  EXPECT_THAT(kv.block_table(2), ElementsAre(0, 2));
  EXPECT_EQ(kv.pool().ref_count(1), 2);
  // Seq 3 writes past the shared block into a new one: a copy and a new block.
  copies.clear();
  EXPECT_EQ(kv.blocks_needed(3, 6, 9), 2);
  ASSERT_TRUE(kv.prepare_write(3, 6, 9, &copies));
  EXPECT_THAT(copies, ElementsAre(BlockCopy{1, 3}));
  EXPECT_THAT(kv.block_table(3), ElementsAre(0, 3, 4));
  // Seq 1 is now the only holder of block 1: no copy.
  copies.clear();
  EXPECT_EQ(kv.blocks_needed(1, 6, 7), 0);
  ASSERT_TRUE(kv.prepare_write(1, 6, 7, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_THAT(kv.block_table(1), ElementsAre(0, 1));
  // Writes that start in a full shared block copy it too.
  copies.clear();
  kv.fork(1, 4);
  EXPECT_EQ(kv.blocks_needed(4, 0, 1), 1);
  for (int64_t s : {1, 2, 3, 4}) kv.free(s);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  EXPECT_EQ(kv.num_sequences(), 0u);
}

TEST(KVCacheManager, MaxWritable) {
  KVCacheManager kv(6, 4);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.prepare_write(1, 0, 5, &copies));  // blocks 0, 1; 3 slots left in 1
  EXPECT_EQ(kv.max_writable(1, 5, 0), 3);
  EXPECT_EQ(kv.max_writable(1, 5, 2), 11);
  EXPECT_EQ(kv.max_writable(9, 0, 2), 8);  // unknown sequence: fresh blocks only
  kv.fork(1, 2);
  EXPECT_EQ(kv.max_writable(2, 5, 0), 0);  // the shared block needs a copy first
  EXPECT_EQ(kv.max_writable(2, 5, 1), 3);
  EXPECT_EQ(kv.max_writable(2, 5, 2), 7);
  EXPECT_EQ(kv.max_writable(2, 4, 1), 4);  // position 4 begins block 1
}

TEST(KVCacheManager, SwapsOutAndBackIn) {
  KVCacheManager kv(6, 4, 3);
  std::vector<BlockCopy> copies, pairs;
  ASSERT_TRUE(kv.prepare_write(1, 0, 10, &copies));  // blocks 0 1 2
  ASSERT_TRUE(kv.prepare_write(2, 0, 4, &copies));   // block 3
  EXPECT_TRUE(kv.can_swap_out(1));
  ASSERT_TRUE(kv.swap_out(1, &pairs));
  EXPECT_THAT(pairs, ElementsAre(BlockCopy{0, 0}, BlockCopy{1, 1}, BlockCopy{2, 2}));
  EXPECT_TRUE(kv.is_swapped(1));
  EXPECT_FALSE(kv.has(1));
  EXPECT_EQ(kv.swapped_blocks(1), 3);
  EXPECT_EQ(kv.num_free_blocks(), 5);
  EXPECT_EQ(kv.num_free_swap_blocks(), 0);
  EXPECT_FALSE(kv.can_swap_out(2));  // no swap space left
  pairs.clear();
  EXPECT_FALSE(kv.swap_out(2, &pairs));
  EXPECT_TRUE(pairs.empty());
  // The freed blocks go to another sequence; swapping back in takes fresh ones.
  ASSERT_TRUE(kv.prepare_write(2, 4, 8, &copies));  // block 0 (freed, uncached: first)
  ASSERT_TRUE(kv.swap_in(1, &pairs));
  EXPECT_THAT(pairs, ElementsAre(BlockCopy{0, 1}, BlockCopy{1, 2}, BlockCopy{2, 4}));
  EXPECT_THAT(kv.block_table(1), ElementsAre(1, 2, 4));
  EXPECT_FALSE(kv.is_swapped(1));
  EXPECT_EQ(kv.num_free_swap_blocks(), 3);
  EXPECT_EQ(kv.num_free_blocks(), 1);
  EXPECT_FALSE(kv.swap_in(1, &pairs));  // not swapped out
}

TEST(KVCacheManager, SwapRefusesSharedBlocksAndAShortCache) {
  KVCacheManager kv(4, 4, 8);
  std::vector<BlockCopy> copies, pairs;
  ASSERT_TRUE(kv.prepare_write(1, 0, 8, &copies));
  kv.fork(1, 2);
  EXPECT_FALSE(kv.can_swap_out(1));
  EXPECT_FALSE(kv.swap_out(2, &pairs));
  kv.free(2);
  ASSERT_TRUE(kv.swap_out(1, &pairs));
  // The cache fills up meanwhile: swap_in changes nothing when it cannot have 2 blocks.
  ASSERT_TRUE(kv.prepare_write(3, 0, 13, &copies));
  pairs.clear();
  EXPECT_FALSE(kv.swap_in(1, &pairs));
  EXPECT_TRUE(pairs.empty());
  EXPECT_TRUE(kv.is_swapped(1));
  EXPECT_EQ(kv.num_free_swap_blocks(), 6);
  // Freeing a swapped-out sequence releases its swap blocks.
  kv.free(1);
  EXPECT_FALSE(kv.is_swapped(1));
  EXPECT_EQ(kv.num_free_swap_blocks(), 8);
  EXPECT_FALSE(KVCacheManager(4, 4).can_swap_out(1));
}

TEST(KVCacheManager, RandomForksAndFreesKeepCountsConsistent) {
  // Random forks, writes and frees; after every operation each block's count must be
  // the number of tables holding it.
  std::mt19937 rng(7);
  KVCacheManager kv(64, 4);
  std::vector<int64_t> live;
  std::unordered_map<int64_t, int32_t> len;
  int64_t next = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const int op = static_cast<int>(rng() % 4);
    std::vector<BlockCopy> copies;
    if (op == 0 || live.empty()) {
      const int64_t s = next++;
      const int32_t n = 1 + static_cast<int32_t>(rng() % 12);
      if (kv.prepare_write(s, 0, n, &copies)) {
        live.push_back(s);
        len[s] = n;
      }
    } else if (op == 1) {
      const int64_t p = live[rng() % live.size()];
      const int64_t c = next++;
      kv.fork(p, c);
      live.push_back(c);
      len[c] = len[p];
    } else if (op == 2) {
      const int64_t s = live[rng() % live.size()];
      const int32_t add = 1 + static_cast<int32_t>(rng() % 5);
      const int32_t need = kv.blocks_needed(s, len[s], len[s] + add);
      const int32_t free_before = kv.num_free_blocks();
      if (kv.prepare_write(s, len[s], len[s] + add, &copies)) {
        len[s] += add;
        EXPECT_EQ(free_before - kv.num_free_blocks(), need);
        for (const auto& c : copies) EXPECT_NE(c.src, c.dst);
      } else {
        EXPECT_GT(need, free_before);
      }
    } else {
      const size_t i = rng() % live.size();
      kv.free(live[i]);
      live.erase(live.begin() + static_cast<ptrdiff_t>(i));
    }
    std::vector<int32_t> refs(64, 0);
    for (int64_t s : live) {
      const auto& t = kv.block_table(s);
      EXPECT_EQ(static_cast<int32_t>(t.size()), (len[s] + 3) / 4);
      for (int32_t b : t) ++refs[static_cast<size_t>(b)];
    }
    int32_t free_count = 0;
    for (int32_t b = 0; b < 64; ++b) {
      ASSERT_EQ(kv.pool().ref_count(b), refs[static_cast<size_t>(b)]) << "block " << b;
      free_count += refs[static_cast<size_t>(b)] == 0;
    }
    ASSERT_EQ(kv.num_free_blocks(), free_count);
  }
}

}  // namespace
}  // namespace tachyon
