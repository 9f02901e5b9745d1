// Rotary embeddings, KV-cache writes and paged attention on the CPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/attention_tile.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/vec.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {

void CpuBackend::rotary(Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                        RotaryStyle style, int32_t rotary_dim) {
  if (style == RotaryStyle::kNone || rotary_dim == 0) return;
  TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols(), "rotary qkv {}", qkv.str());
  TACHYON_CHECK(rotary_dim % 2 == 0 && rotary_dim <= layout.head_dim, "rotary_dim {} head_dim {}",
                rotary_dim, layout.head_dim);
  TACHYON_CHECK(style != RotaryStyle::kHalf2D || rotary_dim % 4 == 0,
                "rotary_dim {} of a 2-D rotary is not a multiple of 4", rotary_dim);
  const int64_t n = qkv.dim(0), cols = qkv.dim(1);
  TACHYON_CHECK(cos_sin.ndim() == 2 && cos_sin.dim(0) == n && cos_sin.dim(1) == rotary_dim,
                "rotary cos_sin {} for {} tokens, rotary_dim {}", cos_sin.str(), n, rotary_dim);
  const int half = rotary_dim / 2;
  const int heads = layout.num_heads + layout.num_kv_heads;  // q and k heads are adjacent
  const int hd = layout.head_dim;
  float* base = qkv.data<float>();
  const float* cs = cos_sin.data<float>();
  pool_.parallel_for(0, n, std::max<int64_t>(1, 4096 / (heads * rotary_dim)),
                     [&](int64_t t0, int64_t t1) {
                       for (int64_t t = t0; t < t1; ++t) {
                         const float* c = cs + t * rotary_dim;
                         const float* s = c + half;
                         for (int h = 0; h < heads; ++h) {
                           float* v = base + t * cols + int64_t{h} * hd;
                           if (style == RotaryStyle::kHalf) {
                             for (int p = 0; p < half; ++p) {
                               const float x0 = v[p], x1 = v[p + half];
                               v[p] = x0 * c[p] - x1 * s[p];
                               v[p + half] = x1 * c[p] + x0 * s[p];
                             }
                           } else if (style == RotaryStyle::kHalf2D) {
                             // Pair p of half g (g = p / quarter) is (g * half + j,
                             // g * half + j + quarter), j = p % quarter.
                             const int quarter = half / 2;
                             for (int p = 0; p < half; ++p) {
                               const int i0 = (p / quarter) * half + p % quarter;
                               const float x0 = v[i0], x1 = v[i0 + quarter];
                               v[i0] = x0 * c[p] - x1 * s[p];
                               v[i0 + quarter] = x1 * c[p] + x0 * s[p];
                             }
                           } else {
                             for (int p = 0; p < half; ++p) {
                               const float x0 = v[2 * p], x1 = v[2 * p + 1];
                               v[2 * p] = x0 * c[p] - x1 * s[p];
                               v[2 * p + 1] = x1 * c[p] + x0 * s[p];
                             }
                           }
                         }
                       }
                     });
}

namespace {

// The checks write_kv and attention make of a cache for kv heads of head_dim values.
void check_cache(const LayerKvCache& cache, int kvh, int hd, const char* what) {
  TACHYON_CHECK(cache.k && cache.v && cpu_kv_dtype(cache.k.dtype()) &&
                    cache.v.dtype() == cache.k.dtype() && cache.v.shape() == cache.k.shape() &&
                    cache.k.ndim() == 4 && cache.k.dim(1) == kvh &&
                    cache.k.dim(3) == hd + kv_row_extra(cache.k.dtype()),
                "{} cache k {} v {} for {} kv heads of dim {}", what,
                cache.k ? cache.k.str() : std::string("none"),
                cache.v ? cache.v.str() : std::string("none"), kvh, hd);
}

}  // namespace

void CpuBackend::write_kv(const Tensor& qkv, const QkvLayout& layout, const Tensor& slots,
                          LayerKvCache& cache) {
  TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols(), "write_kv qkv {}", qkv.str());
  const int64_t n = qkv.dim(0), cols = qkv.dim(1);
  TACHYON_CHECK_EQ(slots.numel(), n);
  const int kvh = layout.num_kv_heads, hd = layout.head_dim;
  check_cache(cache, kvh, hd, "write_kv");
  const int64_t bs = cache.block_size(), nb = cache.num_blocks();
  const int32_t* slot = slots.data<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    TACHYON_CHECK(slot[t] < nb * bs, "write_kv slot {} of {} blocks x {}", slot[t], nb, bs);
  const float* src = qkv.data<float>();
  const DType kt = cache.k.dtype();
  void* kc = cache.k.raw();
  void* vc = cache.v.raw();
  pool_.parallel_for(0, n, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (slot[t] < 0) continue;
      const int64_t block = slot[t] / bs, off = slot[t] % bs;
      const float* krow = src + t * cols + layout.q_cols();
      const float* vrow = krow + layout.kv_cols();
      for (int h = 0; h < kvh; ++h) {
        const int64_t row = (block * kvh + h) * bs + off;
        write_kv_row(kc, kt, row, hd, krow + int64_t{h} * hd);
        write_kv_row(vc, kt, row, hd, vrow + int64_t{h} * hd);
      }
    }
  });
}

namespace {

inline float round_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

// Scratch for one attention task, grown on demand and kept per thread.
struct AttnScratch {
  std::vector<float> scores;
  std::vector<float> acc;
  std::vector<float> tile;
  std::vector<float> row;  // a dequantized key or value row
};
thread_local AttnScratch tl_scratch;

}  // namespace

void CpuBackend::attention(const Tensor& qkv, const QkvLayout& layout, const LayerKvCache& cache,
                           const AttentionMeta& meta, const AttentionParams& params, Tensor& out) {
  TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols(), "attention qkv {}", qkv.str());
  const int64_t n = qkv.dim(0), cols = qkv.dim(1);
  const int H = layout.num_heads, KV = layout.num_kv_heads, hd = layout.head_dim;
  TACHYON_CHECK(KV > 0 && H % KV == 0, "heads {} kv heads {}", H, KV);
  TACHYON_CHECK(out.ndim() == 2 && out.dim(0) == n && out.dim(1) == int64_t{H} * hd,
                "attention out {}", out.str());
  check_cache(cache, KV, hd, "attention");
  TACHYON_CHECK(!params.alibi_slopes || params.alibi_slopes.numel() == H, "alibi slopes {}",
                params.alibi_slopes.str());
  const int S = meta.num_seqs;
  const int group = H / KV;
  const int64_t bs = cache.block_size(), nb = cache.num_blocks();
  const int32_t* qs = meta.query_start.data<int32_t>();
  const int32_t* ctx = meta.context_lens.data<int32_t>();
  const int32_t* bt = meta.block_tables.data<int32_t>();
  const int64_t mb = meta.max_blocks_per_seq;
  TACHYON_CHECK(qs[0] == 0 && qs[S] == n, "query_start [{} .. {}] for {} tokens", qs[0], qs[S], n);
  const int32_t* prefix = nullptr;
  if (meta.prefix_lens) {
    TACHYON_CHECK(meta.prefix_lens.numel() == S && meta.prefix_lens.dtype() == DType::kI32 &&
                      params.sliding_window == 0,
                  "attention prefix_lens {} for {} sequences (sliding window {})",
                  meta.prefix_lens.str(), S, params.sliding_window);
    prefix = meta.prefix_lens.data<int32_t>();
  }
  for (int s = 0; s < S; ++s) {
    const int q_len = qs[s + 1] - qs[s];
    TACHYON_CHECK(q_len >= 0 && ctx[s] >= q_len && ctx[s] <= mb * bs,
                  "sequence {}: {} query tokens, context {}, {} blocks of {}", s, q_len, ctx[s], mb,
                  bs);
    TACHYON_CHECK(prefix == nullptr || (prefix[s] >= 0 && prefix[s] <= ctx[s]),
                  "sequence {}: bidirectional prefix {} with context {}", s, prefix ? prefix[s] : 0,
                  ctx[s]);
  }
  // The last key a query at cache index idx of sequence s sees.
  auto last_key = [&](int s, int64_t idx) {
    return prefix != nullptr ? std::max<int64_t>(idx, int64_t{prefix[s]} - 1) : idx;
  };
  // Tree masks over the step's own keys: whether query i of sequence s sees the step's
  // key j (any key cached before the step is seen).
  const uint32_t* tree = nullptr;
  const int32_t* tree_start = nullptr;
  if (meta.tree_mask) {
    TACHYON_CHECK(meta.tree_mask_start.numel() == S && prefix == nullptr,
                  "attention tree_mask_start {} for {} sequences (prefix {})",
                  meta.tree_mask_start.str(), S, prefix != nullptr);
    tree = static_cast<const uint32_t*>(meta.tree_mask.raw());
    tree_start = meta.tree_mask_start.data<int32_t>();
    for (int s = 0; s < S; ++s) {
      const int64_t q_len = qs[s + 1] - qs[s];
      TACHYON_CHECK(
          tree_start[s] < 0 || tree_start[s] + (q_len * q_len + 31) / 32 <= meta.tree_mask.numel(),
          "sequence {}: tree mask at word {} of {}", s, tree_start[s], meta.tree_mask.numel());
    }
  }
  auto sees = [&](int s, int64_t i, int64_t j_step) {
    if (tree == nullptr || tree_start[s] < 0 || j_step < 0) return true;
    const int64_t q_len = qs[s + 1] - qs[s];
    const int64_t bit = i * q_len + j_step;
    return ((tree[tree_start[s] + bit / 32] >> (bit % 32)) & 1u) != 0;
  };

  const bool wide = isa_ == CpuIsa::kAvx512 && hd % 16 == 0;
  // A step with tree masks takes the scalar path (the only one that reads them).
  const bool tiled =
      tree == nullptr && (wide || (isa_ >= CpuIsa::kAvx2 && use_avx2() && hd % 8 == 0));
  // Tasks: (sequence, kv head, tile of query tokens); on the AVX-512 path, when there
  // are at least as many sequences as threads, a sequence with few query tokens (a
  // decode) is one task over every head, which then reads each block's keys and values
  // of all heads as one contiguous run (fewer sequences keep a task per KV head, so one
  // sequence's decode still uses every thread).
  // Query tokens per tile: a tile's rows (tokens x the group's heads) share each chunk
  // of keys, so a full tile on the AVX-512 path (which transposes every chunk).
  const int kTile = wide ? std::max(1, kAttnTileMaxRows / group) : 8;
  const bool merge_heads = tiled && wide && S >= pool_.num_threads();
  auto all_heads = [&](int q_len) { return merge_heads && int64_t{q_len} * H <= kAttnTileMaxRows; };
  std::vector<int64_t> task_start(static_cast<size_t>(S) + 1, 0);
  for (int s = 0; s < S; ++s) {
    const int q_len = qs[s + 1] - qs[s];
    task_start[s + 1] =
        task_start[s] + (all_heads(q_len) ? 1 : int64_t{KV} * ((q_len + kTile - 1) / kTile));
  }
  const float* q_base = qkv.data<float>();
  const DType kv_type = cache.k.dtype();
  const void* kc = cache.k.raw();
  const void* vc = cache.v.raw();
  const float* slopes = params.alibi_slopes ? params.alibi_slopes.data<float>() : nullptr;
  float* o = out.data<float>();

  for (int s = 0; s < S; ++s) {
    // Blocks wholly before the sliding window are never read (and may be unset).
    const int64_t q_len = qs[s + 1] - qs[s];
    const int64_t first_key = params.sliding_window > 0
                                  ? std::max<int64_t>(0, ctx[s] - q_len - params.sliding_window + 1)
                                  : 0;
    const int64_t need = (int64_t{ctx[s]} + bs - 1) / bs;
    for (int64_t i = first_key / bs; i < need; ++i) {
      const int32_t blk = bt[int64_t{s} * mb + i];
      TACHYON_CHECK(blk >= 0 && blk < nb, "block table entry {} of {} blocks", blk, nb);
    }
  }
  pool_.run(task_start[S], [&](int64_t task) {
    const int s = static_cast<int>(std::upper_bound(task_start.begin(), task_start.end(), task) -
                                   task_start.begin()) -
                  1;
    const int q_len = qs[s + 1] - qs[s];
    const bool every_head = all_heads(q_len);
    const int tiles = (q_len + kTile - 1) / kTile;
    const int64_t local = task - task_start[s];
    const int g = every_head ? 0 : static_cast<int>(local / tiles);
    const int tile = every_head ? 0 : static_cast<int>(local % tiles);
    const int i0 = tile * kTile, i1 = every_head ? q_len : std::min(q_len, i0 + kTile);
    const int g1 = every_head ? KV : g + 1;
    const int32_t* blocks = bt + int64_t{s} * mb;
    AttnScratch& sc = tl_scratch;
    if (tiled) {
      // Rows (query, head of the group) in order, in tiles of at most kAttnTileMaxRows.
      if (sc.tile.size() < static_cast<size_t>(attn_tile_scratch(kAttnTileMaxRows, hd)))
        sc.tile.resize(static_cast<size_t>(attn_tile_scratch(kAttnTileMaxRows, hd)));
      auto run_tile = [&](const AttnTile& tt) {
        if (wide) {
          attention_tile_avx512(tt, sc.tile.data());
        } else {
          attention_tile_avx2(tt, sc.tile.data());
        }
      };
      AttnTile tile;
      tile.k_cache = kc;
      tile.v_cache = vc;
      tile.kv_dtype = kv_type;
      tile.blocks = blocks;
      tile.block_size = bs;
      tile.num_kv_heads = KV;
      tile.kv_head = g;
      tile.heads = g1 - g;
      tile.head_dim = hd;
      tile.params = &params;
      tile.alibi = slopes != nullptr;
      // Rows head-major: for each kv head, its tokens and their query heads.
      for (int gg = g; gg < g1; ++gg)
        for (int i = i0; i < i1; ++i) {
          const int64_t t = qs[s] + i;
          const int64_t idx = ctx[s] - q_len + i;
          const int64_t lo =
              params.sliding_window > 0 ? std::max<int64_t>(0, idx - params.sliding_window + 1) : 0;
          for (int hh = 0; hh < group; ++hh) {
            const int h = gg * group + hh;
            const int r = tile.rows++;
            tile.q[r] = q_base + t * cols + int64_t{h} * hd;
            tile.out[r] = o + t * int64_t{H} * hd + int64_t{h} * hd;
            tile.idx[r] = last_key(s, idx);
            tile.lo[r] = lo;
            tile.slope[r] = slopes != nullptr ? slopes[h] : 0.f;
            if (tile.rows == kAttnTileMaxRows) {
              run_tile(tile);
              tile.rows = 0;
            }
          }
        }
      if (tile.rows > 0) run_tile(tile);
      return;
    }
    if (sc.scores.size() < static_cast<size_t>(ctx[s]))
      sc.scores.resize(static_cast<size_t>(ctx[s]));
    if (sc.acc.size() < static_cast<size_t>(hd)) sc.acc.resize(static_cast<size_t>(hd));
    if (sc.row.size() < static_cast<size_t>(hd)) sc.row.resize(static_cast<size_t>(hd));
    float* row = sc.row.data();
    float* scores = sc.scores.data();
    float* acc = sc.acc.data();
    const int64_t step0 = ctx[s] - q_len;  // cache index of the step's first token
    for (int i = i0; i < i1; ++i) {
      const int64_t t = qs[s] + i;
      const int64_t idx = ctx[s] - q_len + i;  // this query's cache index
      const int64_t lo =
          params.sliding_window > 0 ? std::max<int64_t>(0, idx - params.sliding_window + 1) : 0;
      const int64_t hi = last_key(s, idx);
      for (int hh = 0; hh < group; ++hh) {
        const int h = g * group + hh;
        const float* q = q_base + t * cols + int64_t{h} * hd;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j <= hi; ++j) {
          if (tree != nullptr && !sees(s, i, j - step0)) {
            scores[j - lo] = -std::numeric_limits<float>::infinity();
            continue;
          }
          const int64_t blk = blocks[j / bs];
          TACHYON_CHECK(blk >= 0 && blk < nb, "block table entry {} of {} blocks", blk, nb);
          const float* k = read_kv_row(kc, kv_type, (blk * KV + g) * bs + j % bs, hd, row);
          float sc_j = dot(q, k, hd) * params.scale;
          if (params.softcap > 0.f) sc_j = params.softcap * std::tanh(sc_j / params.softcap);
          if (slopes != nullptr) {
            float b = slopes[h] * static_cast<float>(j);
            if (params.alibi_bias_bf16) b = round_bf16(b);
            sc_j += params.alibi_scale * b;
          }
          scores[j - lo] = sc_j;
          mx = std::max(mx, sc_j);
        }
        double sum = 0;
        for (int64_t j = lo; j <= hi; ++j) {
          const float e = std::exp(scores[j - lo] - mx);
          scores[j - lo] = e;
          sum += e;
        }
        std::fill(acc, acc + hd, 0.f);
        for (int64_t j = lo; j <= hi; ++j) {
          if (tree != nullptr && !sees(s, i, j - step0)) continue;
          const int64_t blk = blocks[j / bs];
          axpy(scores[j - lo], read_kv_row(vc, kv_type, (blk * KV + g) * bs + j % bs, hd, row), acc,
               hd);
        }
        const float inv = static_cast<float>(1.0 / sum);
        float* dst = o + t * int64_t{H} * hd + int64_t{h} * hd;
        for (int d = 0; d < hd; ++d) dst[d] = acc[d] * inv;
      }
    }
  });
}

}  // namespace tachyon::cpu
