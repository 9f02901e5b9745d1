// What the two prefill flash kernels (attention_flash.cu on mma.sync, and
// attention_flash_wgmma.cu) share: a block's work item, its queries and keys, where its
// rows live in qkv and out, and the cache row of each key.
//
// A block owns kRows rows: q_tile = kRows / group query tokens of one sequence times the
// `group` query heads that share KV head kvh. Row r is query r / group, head
// kvh * group + r % group. Query tiles are aligned to the end of their sequence (the
// partial one is the first, the cheapest). With host copies of the lengths the blocks
// follow a work list whose items carry the tile's sequence, first token, query count
// and first query's cache index (attention_flash_items); without, the grid is every
// (tile counted from the sequence's end, sequence) pair, tile-major, and blocks past a
// sequence's tiles have no work. Either way the block's KV head is the fastest index.
#pragma once

#include <cstdint>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_util.cuh"

namespace tachyon::cuda {

struct FlashTile {
  int s, kvh;          // sequence, KV head
  int tok0, n_q;       // the block's queries: n_q tokens from row tok0 of qkv and out
  int first_idx;       // cache index of the first
  int k_begin, k_end;  // the keys any of its queries sees
  int n_tiles;         // key tiles from k_begin
  int group, used_rows;
  // ceil(2^16 / group): r / group is (r * group_inv) >> 16 for every row r < 512 (the
  // product's excess over r / group stays below 1 / group). A division by a runtime
  // divisor is a ~25-instruction sequence, and the Q copy and the O store take one per
  // piece: they made up most of a block's start and end (a per-block timestamp probe
  // on the GPU put them at 4.3 and 1.8 us of a 16 us average block).
  uint32_t group_inv;

  __device__ __forceinline__ int query_in_tile(int r) const {
    return static_cast<int>((static_cast<uint32_t>(r) * group_inv) >> 16);
  }
  // The cache index of row r's query; rows past the tile repeat its last query (their
  // results are never stored), which keeps the function monotone in r.
  __device__ __forceinline__ int query_of(int r) const {
    return first_idx + (r < used_rows ? min(query_in_tile(r), n_q - 1) : n_q - 1);
  }
  __device__ __forceinline__ bool row_live(int r) const {
    return r < used_rows && query_in_tile(r) < n_q;
  }
  // Element offset of row r's head in a [tokens][cols] tensor (qkv's Q part, or out).
  __device__ __forceinline__ int64_t row_offset(int r, int64_t cols, int head_dim) const {
    const int qi = query_in_tile(r);
    return (int64_t{tok0} + qi) * cols + int64_t{kvh * group + (r - qi * group)} * head_dim;
  }
};

// Query tile j (counted from the end) of a sequence whose q_len queries start at row q0
// of qkv and end at cache index ctx - 1: its first token, query count and first query's
// cache index; false past the sequence's tiles. Shared by the host's work list
// (attention_flash_items) and the kernels' dense grid.
__host__ __device__ __forceinline__ bool flash_tile_span(int q0, int q_len, int ctx, int j,
                                                         int q_tile, int& tok0, int& n_q,
                                                         int& first_idx) {
  const int hi = q_len - j * q_tile;  // the tile is queries [tile0, hi) of the sequence
  if (hi <= 0) return false;
  const int tile0 = hi > q_tile ? hi - q_tile : 0;
  tok0 = q0 + tile0;
  n_q = hi - tile0;
  first_idx = ctx - q_len + tile0;
  return true;
}

// The block's work; false when it has none (a dense grid's tile past the sequence).
template <int kKeys>
__device__ __forceinline__ bool flash_tile(const AttentionArgs& a, const int32_t* items, int group,
                                           int q_tile, FlashTile& f) {
  const int item = static_cast<int>(blockIdx.x) / a.kv_heads;
  f.kvh = static_cast<int>(blockIdx.x) - item * a.kv_heads;
  if (items != nullptr) {  // one 16-byte load, no dependent reads of the lengths
    const int4 it = *reinterpret_cast<const int4*>(items + kFlashItemInts * item);
    f.s = it.x;
    f.tok0 = it.y;
    f.n_q = it.z;
    f.first_idx = it.w;
  } else {
    const int j = item / a.num_seqs;  // query tile counted from the sequence's end
    f.s = item - j * a.num_seqs;
    const int q0 = a.query_start[f.s];
    if (!flash_tile_span(q0, a.query_start[f.s + 1] - q0, a.context_lens[f.s], j, q_tile, f.tok0,
                         f.n_q, f.first_idx))
      return false;
  }
  f.k_begin = a.sliding_window > 0 ? max(0, f.first_idx - a.sliding_window + 1) : 0;
  f.k_end = f.first_idx + f.n_q;  // one past the last query's own key
  f.n_tiles = (f.k_end - f.k_begin + kKeys - 1) / kKeys;
  f.group = group;
  f.group_inv = (65536u + group - 1) / group;
  f.used_rows = q_tile * group;
  return true;
}

// The block-table entry of key `key` (0, nothing read, past the block's keys).
__device__ __forceinline__ int flash_key_block(const AttentionArgs& a, const FlashTile& f,
                                               int key) {
  return key < f.k_end ? a.block_tables[int64_t{f.s} * a.max_blocks + key / a.block_size] : 0;
}

// The cache row ((block * kv_heads + kvh) * block_size + offset) of key `key` whose
// block-table entry is blk, or -1: past the keys, or a bad entry (reported).
__device__ __forceinline__ int flash_key_row(const AttentionArgs& a, const FlashTile& f, int key,
                                             int blk) {
  if (key >= f.k_end) return -1;
  if (blk < 0 || blk >= a.num_blocks) {
    report(a.err, kErrBlockTable);
    return -1;
  }
  return (blk * a.kv_heads + f.kvh) * a.block_size + key % a.block_size;
}

// The online softmax of a lane's two rows (g = lane / 4 and g + 8 of its warp's 16).
struct FlashRows {
  float m_a = -INFINITY, m_b = -INFINITY;  // running max of the raw scores
  float l_a = 0.f, l_b = 0.f;              // this lane's part of the running sums
  bool kept = false;  // step<kLazy>: the warp kept its maxes (every factor is exactly 1)

  // One key tile: at(n, e) is the score of key kt + 8n + 2 (lane % 4) + (e & 1) for row
  // g's query qa (e < 2) or row g + 8's qb, the m16n8 accumulator layout over kNTiles
  // column tiles. With edge, keys past the row's query or before its window are masked.
  // The scores become p = exp(s - max), summed into l; returns the factors (rows g,
  // g + 8) that rescale O to the new max.
  // kLazy: the warp keeps its rows' old maxes unless one of them would grow by more than
  // 2^8 (kLazyLog2) -- then p <= 256, harmless in f32 sums and in P's 16-bit form, and the
  // final 1 / l uses the same max -- so most tiles return factors of exactly 1 (kept set)
  // and the caller may skip the rescale. The warp's choice is uniform.
  template <int kNTiles, bool kLazy = false, typename At>
  __device__ __forceinline__ float2 step(At&& at, bool edge, int kt, int qa, int qb, int window,
                                         float scale_log2, int lane) {
    if (edge) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kt + n * 8 + (lane & 3) * 2 + (e & 1);
          const int q = e < 2 ? qa : qb;
          if (key > q || (window > 0 && key <= q - window)) at(n, e) = -INFINITY;
        }
    }
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      mx_a = fmaxf(mx_a, fmaxf(at(n, 0), at(n, 1)));
      mx_b = fmaxf(mx_b, fmaxf(at(n, 2), at(n, 3)));
    }
    // The four lanes of a quad hold one row.
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    if constexpr (kLazy) {
      // Keep the old maxes (as finite as they were) unless a row's grows past the bound
      // or is still -inf with a visible key now.
      const bool grow =
          (mx_a - m_a) * scale_log2 > kLazyLog2 || (mx_b - m_b) * scale_log2 > kLazyLog2;
      kept = !__any_sync(0xffffffffu, grow);
      if (kept) {
        mx_a = m_a;
        mx_b = m_b;
      }
    }
    // A row with no visible key yet keeps max -inf: its p are 0 and nothing rescales.
    const float base_a = mx_a == -INFINITY ? 0.f : mx_a * scale_log2;
    const float base_b = mx_b == -INFINITY ? 0.f : mx_b * scale_log2;
    const float alpha_a = mx_a == -INFINITY ? 1.f : ex2(m_a * scale_log2 - base_a);
    const float alpha_b = mx_b == -INFINITY ? 1.f : ex2(m_b * scale_log2 - base_b);
    m_a = mx_a;
    m_b = mx_b;
    l_a *= alpha_a;
    l_b *= alpha_b;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      at(n, 0) = ex2(fmaf(at(n, 0), scale_log2, -base_a));
      at(n, 1) = ex2(fmaf(at(n, 1), scale_log2, -base_a));
      at(n, 2) = ex2(fmaf(at(n, 2), scale_log2, -base_b));
      at(n, 3) = ex2(fmaf(at(n, 3), scale_log2, -base_b));
      l_a += at(n, 0) + at(n, 1);
      l_b += at(n, 2) + at(n, 3);
    }
    return make_float2(alpha_a, alpha_b);
  }

  static constexpr float kLazyLog2 = 8.f;

  // After the last tile: 1 / l of rows g and g + 8 (0 for a row that saw no key).
  __device__ __forceinline__ float2 inverse_sums() const {
    float a = l_a, b = l_b;
    a += __shfl_xor_sync(0xffffffffu, a, 1);
    a += __shfl_xor_sync(0xffffffffu, a, 2);
    b += __shfl_xor_sync(0xffffffffu, b, 1);
    b += __shfl_xor_sync(0xffffffffu, b, 2);
    return make_float2(a > 0.f ? 1.f / a : 0.f, b > 0.f ? 1.f / b : 0.f);
  }
};

}  // namespace tachyon::cuda
