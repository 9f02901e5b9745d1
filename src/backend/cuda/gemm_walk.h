// The wgmma GEMM's (gemm_wgmma.cu) division of work among its persistent blocks, in a
// header of its own so that the host's tests can walk it without a GPU.
//
// Stream-K for the last waves: a grid of G blocks that deals out T tiles whole, one a
// block in turn, ends with a partial wave of T % G tiles while the other blocks idle. With
// it, the tiles before dp_tiles (whole waves but the last) are dealt out whole as before,
// and the k-slices of the rest (the partial wave and one whole wave: sk_units slices) are
// divided evenly among the blocks, in order, so a block's share spans less than two tiles
// and a tile at most two blocks. Of a tile split between blocks b and b + 1, block b + 1
// computes its last slices first in its share and writes those accumulators to its slot
// of the workspace, marking each consumer's part with the launch's epoch; block b
// computes the first slices last in its share, by when the other part is long written,
// adds it and writes the tile.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TACHYON_WALK_FN __host__ __device__ __forceinline__
#else
#define TACHYON_WALK_FN inline
#endif

namespace tachyon::cuda {

struct GemmSk {
  int dp_tiles = 0;           // tiles dealt out whole
  int sk_units = 0;           // k-slices of the divided tiles after them (0: none)
  float* partial = nullptr;   // [G][2 consumers][32][128 threads][4] accumulators
  uint32_t* flags = nullptr;  // [G][2]: the epoch once consumer 0, 1 wrote its part
  uint32_t epoch = 0;
};

// The workspace of a grid of G blocks (G <= kSkMaxBlocks): the flags of every grid size
// first, so that launches on grids of different sizes find their flags in one place (a
// grid's partial tiles never lie where another grid reads flags), then the accumulators.
// Zeroed before its first use; a launch's epoch is one above the
// launch before it on the same workspace, so the flags are cleared again only when the
// epochs wrap.
constexpr int kSkMaxBlocks = 1024;
constexpr size_t sk_flag_bytes() {
  return size_t(kSkMaxBlocks) * 2 * 4;
}
constexpr size_t sk_partial_floats(int grid) {
  return size_t(grid) * 2 * 128 * 128;
}
constexpr size_t sk_bytes(int grid) {
  return sk_flag_bytes() + sk_partial_floats(grid) * 4;
}

// The division of num_tiles tiles of kb_count k-slices among grid blocks: stream-K where a
// partial wave follows a whole one (on at most kSkMaxBlocks blocks, the divided slices
// below 2^31), else every tile whole (sk_units 0). The workspace pointers are the caller's.
inline GemmSk plan_stream_k(int64_t num_tiles, int grid, int64_t kb_count) {
  GemmSk sk;
  sk.dp_tiles = static_cast<int>(num_tiles);
  if (grid <= 0 || grid > kSkMaxBlocks || kb_count <= 0) return sk;
  const int64_t rem = num_tiles % grid;
  if (num_tiles > grid && rem != 0 && (rem + grid) * kb_count < (int64_t{1} << 31)) {
    sk.dp_tiles = static_cast<int>(num_tiles - rem - grid);
    sk.sk_units = static_cast<int>((rem + grid) * kb_count);
  }
  return sk;
}

// Block `first`'s work in order (of a grid of `step`): tile t, k-slices [kb0, kb1). Its
// whole tiles first + i step (before dp_tiles with stream-K), then (kSk) its share of the
// divided tiles' slices: a tile's last slices (kb0 > 0) can only open the share, its first
// slices (kb1 < kb_count) only close it.
template <bool kSk>
struct TileWalk {
  int t_next, step, end, kb_count, dp_tiles = 0;
  int u = 0, u1 = 0;  // (sk_units < 2^31: plan_stream_k)
  TACHYON_WALK_FN TileWalk(int first, int step_, int num_tiles, int kb_count_, const GemmSk& sk)
      : t_next(first), step(step_), end(num_tiles), kb_count(kb_count_) {
    if (kSk && sk.sk_units > 0) {
      end = sk.dp_tiles;
      dp_tiles = sk.dp_tiles;
      u = static_cast<int>(int64_t{first} * sk.sk_units / step);
      u1 = static_cast<int>(int64_t{first + 1} * sk.sk_units / step);
    }
  }
  TACHYON_WALK_FN bool next(int& t, int& kb0, int& kb1) {
    if (t_next < end) {
      t = t_next;
      t_next += step;
      kb0 = 0;
      kb1 = kb_count;
      return true;
    }
    if constexpr (kSk) {
      if (u < u1) {
        t = dp_tiles + u / kb_count;
        kb0 = u % kb_count;
        kb1 = kb0 + (u1 - u) < kb_count ? kb0 + (u1 - u) : kb_count;
        u += kb1 - kb0;
        return true;
      }
    }
    return false;
  }
};

}  // namespace tachyon::cuda

#undef TACHYON_WALK_FN
