// The wgmma GEMM's division of work among its blocks (backend/cuda/gemm_walk.h), walked on
// the host: what the kernel's stream-K relies on to be right and to never wait forever.
#include "backend/cuda/gemm_walk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tachyon::cuda {
namespace {

struct Item {
  int t, kb0, kb1;
};

std::vector<std::vector<Item>> walk_all(int64_t tiles, int grid, int kb_count, const GemmSk& sk,
                                        bool stream_k) {
  std::vector<std::vector<Item>> out(static_cast<size_t>(grid));
  for (int b = 0; b < grid; ++b) {
    int t, kb0, kb1;
    if (stream_k) {
      TileWalk<true> w(b, grid, static_cast<int>(tiles), kb_count, sk);
      while (w.next(t, kb0, kb1)) out[b].push_back({t, kb0, kb1});
    } else {
      TileWalk<false> w(b, grid, static_cast<int>(tiles), kb_count, sk);
      while (w.next(t, kb0, kb1)) out[b].push_back({t, kb0, kb1});
    }
  }
  return out;
}

TEST(GemmWalk, PlanOnlyWithAPartialWaveAfterAWholeOne) {
  EXPECT_EQ(plan_stream_k(100, 132, 64).sk_units, 0);  // one partial wave: nothing to even out
  EXPECT_EQ(plan_stream_k(264, 132, 64).sk_units, 0);  // whole waves
  const GemmSk sk = plan_stream_k(7168, 132, 64);      // gate_up at 8192 rows
  EXPECT_EQ(sk.dp_tiles, 7168 - 40 - 132);
  EXPECT_EQ(sk.sk_units, (40 + 132) * 64);
  EXPECT_EQ(plan_stream_k(7168, 132, int64_t{1} << 24).sk_units, 0);  // past 2^31 slices
  EXPECT_EQ(plan_stream_k(10, 0, 4).sk_units, 0);
  EXPECT_GT(plan_stream_k(3 * kSkMaxBlocks + 1, kSkMaxBlocks, 4).sk_units, 0);
  EXPECT_EQ(plan_stream_k(3 * kSkMaxBlocks + 3, kSkMaxBlocks + 1, 4).sk_units, 0);  // no flags
}

// The flags sit before every grid's partial tiles: a launch on one grid size never writes
// accumulators where a launch on another reads its flags.
TEST(GemmWalk, WorkspaceFlagsInOnePlaceForEveryGrid) {
  for (int g : {1, 5, 16, 132, kSkMaxBlocks}) {
    EXPECT_GE(sk_flag_bytes(), size_t(g) * 2 * 4);
    EXPECT_EQ(sk_bytes(g), sk_flag_bytes() + sk_partial_floats(g) * 4);
  }
  EXPECT_EQ(sk_flag_bytes() % 16, 0u);  // the partial tiles stay float4-aligned
}

// Every (tile, slice) exactly once; whole tiles before dp_tiles, dealt in turn; in the
// divided region a block's items are a tile's last slices (only first), whole tiles, a
// tile's first slices (only last); a split tile's first slices in block b and last in
// block b + 1 (the workspace slot the kernel reads); the blocks' slices within one of
// each other.
TEST(GemmWalk, StreamKCoversEverySliceOnceAndSplitsBetweenNeighbours) {
  int checked = 0;
  for (int grid : {1, 2, 5, 7, 13, 16, 132}) {
    for (int kb_count : {1, 2, 3, 9, 17, 64, 224}) {
      for (int64_t tiles :
           {int64_t{1}, int64_t{grid - 1}, int64_t{grid}, int64_t{grid + 1}, int64_t{2 * grid - 1},
            int64_t{3 * grid + 7}, int64_t{7168}, int64_t{1536}, int64_t{1024}}) {
        if (tiles <= 0) continue;
        const int g = static_cast<int>(std::min<int64_t>(grid, tiles));  // launch_typed's grid
        const GemmSk sk = plan_stream_k(tiles, g, kb_count);
        const std::string what = std::to_string(tiles) + " tiles, " + std::to_string(g) +
                                 " blocks, " + std::to_string(kb_count) + " slices";
        const auto plain = walk_all(tiles, g, kb_count, sk, false);
        const auto split = walk_all(tiles, g, kb_count, sk, true);
        std::vector<int> seen(static_cast<size_t>(tiles * kb_count), 0);
        std::vector<int> head_of(static_cast<size_t>(tiles), -1),
            tail_of(static_cast<size_t>(tiles), -1);
        std::vector<int64_t> region_slices(static_cast<size_t>(g), 0);
        for (int b = 0; b < g; ++b) {
          // Without stream-K: tiles b, b + g, ... whole.
          for (size_t i = 0; i < plain[b].size(); ++i) {
            ASSERT_EQ(plain[b][i].t, b + static_cast<int>(i) * g) << what;
            ASSERT_EQ(plain[b][i].kb0, 0);
            ASSERT_EQ(plain[b][i].kb1, kb_count);
          }
          const std::vector<Item>& items = split[b];
          for (size_t i = 0; i < items.size(); ++i) {
            const Item& it = items[i];
            ASSERT_TRUE(it.t >= 0 && it.t < tiles && 0 <= it.kb0 && it.kb0 < it.kb1 &&
                        it.kb1 <= kb_count)
                << what;
            for (int kb = it.kb0; kb < it.kb1; ++kb)
              ++seen[static_cast<size_t>(it.t) * kb_count + kb];
            if (it.t < sk.dp_tiles) {
              ASSERT_EQ(it.t % g, b) << what;
              ASSERT_TRUE(it.kb0 == 0 && it.kb1 == kb_count) << what;
              continue;
            }
            region_slices[b] += it.kb1 - it.kb0;
            ASSERT_FALSE(it.kb0 > 0 && it.kb1 < kb_count) << what << ": a middle part";
            if (it.kb0 > 0) {
              ASSERT_TRUE(i == 0 || items[i - 1].t < sk.dp_tiles) << what << ": tail not first";
              tail_of[it.t] = b;
            }
            if (it.kb1 < kb_count) {
              ASSERT_EQ(i + 1, items.size()) << what << ": head not last";
              head_of[it.t] = b;
            }
          }
        }
        for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << what << " slice " << i;
        for (int64_t t = 0; t < tiles; ++t) {
          ASSERT_EQ(head_of[t] < 0, tail_of[t] < 0) << what << " tile " << t;
          if (head_of[t] >= 0) {
            ASSERT_EQ(tail_of[t], head_of[t] + 1) << what << " tile " << t;
          }
        }
        if (sk.sk_units > 0) {
          for (int b = 0; b < g; ++b) {
            ASSERT_LE(region_slices[b], sk.sk_units / g + 1) << what;
            ASSERT_GE(region_slices[b], sk.sk_units / g) << what;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);  // the divided cases were among them
}

}  // namespace
}  // namespace tachyon::cuda
