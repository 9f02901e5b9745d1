// What the low-rank adapter kernels (lora.cu, lora_prefill.cu) share: the launch shape,
// the grouping of a range of tokens by slot (warp-level, no shared memory) and the
// checked rank of a slot's part.
//
// Every kernel reads row_slots, ranks and the arena before its programmatic dependency
// wait (launch.cuh): backend/ops.h's LoraStep promises that nothing of a step writes them
// from a kernel. Only x, the shrunk rows and out are read after it.
#pragma once

#include <cstdint>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/lora_kernels.h"

namespace tachyon::cuda::lora {

constexpr int kGroupedRows = 64;  // the largest T whose groups are the distinct slots
constexpr int kTile = 64;         // tokens per group above kGroupedRows (<= 64: one mask)
constexpr int kMaxRank = 64;      // the largest R (a multiple of 8)
constexpr int kMaxParts = 3;

struct LoraShape {
  const int32_t* row_slots;
  const int32_t* ranks;
  int64_t entries;  // ranks.dim(1)
  int rank_index;
  int slots;          // arena.dim(0)
  int64_t row_elems;  // arena.dim(1)
  int64_t a_offset, b_offset;
  int64_t t, n, k;
  int r;  // R
  int parts;
  int64_t part_end[kMaxParts];
  int kchunks;  // K pieces of the shrink's partial sums
};

// Which tokens a block's group holds: T <= kGroupedRows: all of them, the group being the
// blockIdx.x-th distinct slot; above: the blockIdx.x-th tile of kTile, each distinct slot
// of it in turn.
struct GroupRange {
  bool grouped;
  int64_t t0;
  int n;
};

__device__ __forceinline__ GroupRange group_range(int64_t t) {
  GroupRange r;
  r.grouped = t <= kGroupedRows;
  r.t0 = r.grouped ? 0 : static_cast<int64_t>(blockIdx.x) * kTile;
  r.n = static_cast<int>(t - r.t0 < kTile ? t - r.t0 : kTile);
  return r;
}

// The slots of tokens [t0, t0 + n), n <= 64, held by a whole warp: lane l has those of
// tokens l and l + 32 (-1: the base model, past the range, or a slot past the arena,
// reported in err when `report`). `pending` marks the tokens of slots not yet taken.
struct TileSlots {
  int lo, hi;
  uint64_t pending;
};

__device__ __forceinline__ uint64_t ballot64(bool lo, bool hi) {
  return static_cast<uint64_t>(__ballot_sync(0xffffffffu, lo)) |
         static_cast<uint64_t>(__ballot_sync(0xffffffffu, hi)) << 32;
}

__device__ __forceinline__ TileSlots load_tile_slots(const int32_t* __restrict__ row_slots,
                                                     int64_t t0, int n, int slots, int* err,
                                                     bool report) {
  const int lane = threadIdx.x & 31;
  int s[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = lane + 32 * h;
    s[h] = i < n ? row_slots[t0 + i] : -1;
    if (s[h] >= slots) {
      if (report) atomicOr(err, kErrLoraSlot);
      s[h] = -1;
    }
    s[h] = s[h] < 0 ? -1 : s[h];
  }
  TileSlots ts;
  ts.lo = s[0];
  ts.hi = s[1];
  ts.pending = ballot64(s[0] >= 0, s[1] >= 0);
  return ts;
}

// The next distinct slot of the range (in order of first appearance) and the mask of its
// tokens; -1 when none is left. Warp-uniform.
__device__ __forceinline__ int next_slot(TileSlots& ts, uint64_t& mask) {
  if (ts.pending == 0) return -1;
  const int first = __ffsll(static_cast<long long>(ts.pending)) - 1;
  const int v = __shfl_sync(0xffffffffu, first < 32 ? ts.lo : ts.hi, first & 31);
  mask = ballot64(ts.lo == v, ts.hi == v);
  ts.pending &= ~mask;
  return v;
}

// The d-th distinct slot (-1: fewer than d + 1) and its tokens.
__device__ __forceinline__ int nth_slot(TileSlots& ts, int d, uint64_t& mask) {
  int v = next_slot(ts, mask);
  for (int i = 0; i < d && v >= 0; ++i) v = next_slot(ts, mask);
  return v;
}

// Takes the lowest token of a mask.
__device__ __forceinline__ int pop_token(uint64_t& mask) {
  const int i = __ffsll(static_cast<long long>(mask)) - 1;
  mask &= mask - 1;
  return i;
}

// A slot's rank for one part, clamped to [0, R] (a bad one reported).
__device__ __forceinline__ int part_rank(const int32_t* __restrict__ ranks, int64_t entries,
                                         int slot, int index, int R, int* err) {
  const int r = ranks[slot * entries + index];
  if (r < 0 || r > R) {
    atomicOr(err, kErrLoraSlot);
    return 0;
  }
  return r;
}

// The ranks of a slot's parts (0 past the target's parts).
struct PartRanks {
  int r[kMaxParts];
  __device__ __forceinline__ int of(int p) const { return p == 0 ? r[0] : p == 1 ? r[1] : r[2]; }
};

__device__ __forceinline__ PartRanks slot_ranks(const LoraShape& sh, int slot, int* err) {
  PartRanks pr;
#pragma unroll
  for (int p = 0; p < kMaxParts; ++p)
    pr.r[p] =
        p < sh.parts ? part_rank(sh.ranks, sh.entries, slot, sh.rank_index + p, sh.r, err) : 0;
  return pr;
}

// The part of output column c (constant indices: a run-time one would copy the shape to
// local memory).
__device__ __forceinline__ int part_of(const LoraShape& sh, int64_t c) {
  return (sh.parts > 1 && c >= sh.part_end[0]) + (sh.parts > 2 && c >= sh.part_end[1]);
}

// The prefill expand on the tensor cores (lora_prefill.cu; bf16 and f16): part holds the
// shrunk rows [T, P R] (one K piece).
void launch_expand_mma(const LoraShape& sh, DType type, const void* arena, const float* part,
                       void* out, int64_t ldo, int* err, cudaStream_t stream);

}  // namespace tachyon::cuda::lora
