// The paged-attention tile kernels (AVX2 and AVX-512): a block of query rows (several
// query tokens x the query heads sharing one KV head) against the keys/values of one
// sequence, with an online softmax over key chunks (each chunk inside one cache
// block), so K and V are read once per tile.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "core/dtype.h"

namespace tachyon::cpu {

inline constexpr int kAttnTileMaxRows = 32;
inline constexpr int kAttnKeyChunk = 16;

struct AttnTile {
  int rows = 0;
  const float* q[kAttnTileMaxRows];
  float* out[kAttnTileMaxRows];
  int64_t idx[kAttnTileMaxRows];  // the row's cache index (last visible key)
  int64_t lo[kAttnTileMaxRows];   // first visible key
  float slope[kAttnTileMaxRows];  // ALiBi slope of the row's head (unused without ALiBi)
  // The layer's caches (backend/ops.h LayerKvCache) in kv_dtype: f32, bf16, or int8
  // rows of head_dim values and their float scale (backend/cpu/kv_rows.h). Keys and
  // values are converted to f32 as they are loaded; an int8 row's scale multiplies its
  // score (K) or its probability (V).
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  DType kv_dtype = DType::kF32;
  const int32_t* blocks = nullptr;  // the sequence's block table
  int64_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t kv_head = 0;
  // AVX-512 only: the rows belong to kv heads kv_head .. kv_head + heads - 1, an equal
  // number each, in that order (a decode step's query heads read a block's keys and
  // values of every head as one contiguous run).
  int32_t heads = 1;
  int32_t head_dim = 0;  // a multiple of 8
  const AttentionParams* params = nullptr;
  bool alibi = false;
};

// Scratch floats either kernel needs for a tile of `rows` rows.
inline int64_t attn_tile_scratch(int rows, int head_dim) {
  return int64_t{rows} * head_dim + int64_t{head_dim} * kAttnKeyChunk +
         int64_t{rows} * (kAttnKeyChunk + 3) + 8;
}

// Computes the tile's outputs. Requires use_avx2() and head_dim % 8 == 0.
void attention_tile_avx2(const AttnTile& t, float* scratch);
// The same on the AVX-512 path; requires head_dim % 16 == 0.
void attention_tile_avx512(const AttnTile& t, float* scratch);

}  // namespace tachyon::cpu
