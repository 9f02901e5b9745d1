// Paged attention for decode steps (FlashDecoding on the tensor cores). A block owns
// (key split, KV head, sequence); its four warps stream the split's keys in tiles of
// 16, tile i of the split going to warp i % 4. Each warp runs its own pipeline: it
// copies its next tiles' K and V rows (16 bytes a lane, cp.async, zero-filled past the
// keys it needs) into its own shared-memory stages, kStages deep, and computes on the
// oldest one, so no block barrier sits in the key loop. Per tile, with the group's
// (query, head) pairs as the 8 columns of the mma's N:
//   Sᵀ[16 keys][8 cols] = K Qᵀ       (mma.sync m16n8k16; K by ldmatrix, Qᵀ in registers)
//   online softmax per column in f32 (log2 domain; mask, scale, softcap, ALiBi)
//   Oᵀ[hd][8 cols]     += Vᵀ Pᵀ      (Vᵀ by ldmatrix.trans; Pᵀ from Sᵀ by movmatrix)
// P is rounded to the storage dtype for the mma and summed as rounded. An fp8 (e4m3)
// cache is copied as it is stored (half the bytes) and its fragments are read straight
// from the copied tile and converted to f16 in registers (exact: every e4m3 value is an
// f16), so both products run in f16 whatever the compute dtype (the query is rounded to
// f16 once, saturated; P in f16 is finer than in bf16). For that the fragments' logical
// rows and columns are permuted onto the stored bytes so that each lane reads whole
// 16-byte chunks: K's head dims (the sum of K Qᵀ runs over them in any order, so Q is
// loaded in the same order) and Vᵀ's output dims (undone when the output is written).
// The warps merge in shared memory at the end. Key splits, when the plan makes them, are merged in
// one of two ways, whichever the plan's wave model (plan_time) finds faster:
//  - in a thread-block cluster (2..16 splits, where such clusters fit the device): the
//    splits of a (sequence, KV head) are one cluster, each block keeps its split's
//    record in shared memory, and after a cluster barrier the blocks read one another's
//    records (distributed shared memory) and write the output -- no partials in global
//    memory, no counter;
//  - through global memory: each split leaves partials, and the last block of the pair
//    to finish (a counter per pair, reset by that block) merges them
//    (combine_splits_kernel only without counters).
// Either way a split step is one kernel. The kernels go through launch_kernel
// (programmatic dependent launch).
//
// Sequences with more than one query token this step (the draft tokens of speculative
// decoding, short chunks) are computed 8 / group queries at a time (the columns of one
// pass); the passes are blocks of their own (the grid's z is sequence x pass), so they
// run side by side, each streaming the keys its queries see (mostly from the L2 after
// the first). A tree mask (AttentionArgs::tree_mask) narrows what a query sees of the
// step's own keys.
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_combine.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/mma_util.cuh"

namespace tachyon::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kKeys = 16;  // keys per warp tile (the mma's M)
constexpr int kCols = 8;   // (query, head) columns per pass (the mma's N)
// Tiles per warp in shared memory: 3 of 16-bit keys, 4 of e4m3 (2/3 of the bytes in
// flight, for three blocks an SM at head_dim 128 instead of two).
constexpr int stages_for(bool fp8) {
  return fp8 ? 4 : 3;
}
constexpr int kSplitUnit = kWarps * kKeys;  // keys per split come in multiples of this
constexpr int kMaxSplits = 256;
constexpr float kLn2 = 0.6931471805599453f;

// Shared memory: per warp kStages stages of [K tile | V tile], each tile 16 rows of
// kHd elements with the 16-byte chunks of row r XOR-swizzled by r % 8 (ldmatrix reads
// 8 rows of one logical chunk: 8 distinct bank groups). With an fp8 cache (C one byte)
// the rows are kHd bytes, swizzled by raw_offset (the fragment loads of 8 lanes then
// hit distinct bank groups). After its key loop a warp reuses its own stages for its
// merge record: m[8], l[8], O[8][kLdo] floats. Then the block's split record for the
// cluster merge: (m, l)[8] as float2, O[8][kHd] floats.
template <int kHd, typename C>
struct DecodeLayout {
  static constexpr bool kFp8 = sizeof(C) == 1;
  static constexpr int kChunks = kHd / 8;                       // 16-byte chunks per 16-bit row
  static constexpr int kRawChunks = kHd * int{sizeof(C)} / 16;  // 16-byte chunks per cache row
  static constexpr int kRawTileBytes = kKeys * kHd * int{sizeof(C)};  // a tile as cached
  static constexpr int kStages = stages_for(kFp8);
  static constexpr int kStageBytes = 2 * kRawTileBytes;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kRecOffset = kWarps * kWarpBytes;  // the block's split record
  static constexpr int kBytes = kRecOffset + kCols * 8 + kCols * kHd * 4;
  static constexpr int kLdo = kHd + 4;  // floats; the fragment stores hit 32 banks
  static_assert(kChunks % 8 == 0, "the swizzle permutes groups of 8 chunks");
  static_assert((2 * kCols + kCols * kLdo) * 4 <= kWarpBytes, "merge record fits a warp's stages");
};

struct DecodePlan {
  int num_splits;  // each pass's keys split evenly
  int passes;      // query passes per sequence (blocks along the grid's z)
  float* part_o;   // [splits, tokens, heads, head_dim]
  float* part_ml;  // [splits, tokens, heads, 2]
  int* counters;  // [seqs, passes, kv_heads], zero between launches; null: merged by another kernel
  bool cluster;   // the splits of a pair are one cluster (rank = split): merged in DSMEM
};

std::atomic<bool> g_cluster_merge{false};

// Byte offset of element (row r, logical chunk c) of a swizzled tile.
template <int kHd>
__device__ __forceinline__ uint32_t tile_offset(int r, int c) {
  return static_cast<uint32_t>(r * kHd + ((c ^ (r & 7)) << 3)) * 2u;
}

// fp8 tiles: byte offset of 16-byte chunk c of row r (rows of kHd bytes). K's fragment
// loads read chunks k_chunk of rows g8 and g8 + 8, Vᵀ's the chunks of v_dim0 of rows
// 2 t4 (+1, +8, +9); with rows of 8 chunks or more an XOR by r % 8 spreads either over
// distinct bank groups. Rows of 64 bytes (4 chunks) swizzle by r & 2: K's loads are
// then conflict-free and Vᵀ's 8-byte loads two-way.
template <int kHd>
__device__ __forceinline__ uint32_t raw_offset(int r, int c) {
  const int x = kHd == 64 ? (r & 2) : (r & 7);
  return static_cast<uint32_t>(r * kHd + ((c ^ x) << 4));
}

// fp8: the stored chunk that holds k-steps 4 i .. 4 i + 3 of lane group t4 in K Qᵀ. The
// mma's logical dims {2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9} of k-step k are the 4 bytes
// at 16 k_chunk(k / 4) + 4 (k % 4) of a key's row.
template <int kHd>
__device__ __forceinline__ int k_chunk(int i, int t4) {
  return kHd == 64 ? t4 : 2 * t4 + (i & 1) + 8 * (i >> 1);
}

// fp8: the stored head dim of Vᵀ's logical row 16 mt + g8 (row 16 mt + g8 + 8 is the
// next dim). Lane group g8 holds 16 consecutive bytes of a key per 8 m-tiles (8 at
// head_dim 64): chunk g8 (+ 8 for m-tiles 8..15).
template <int kHd>
__device__ __forceinline__ int v_dim0(int mt, int g8) {
  return kHd == 64 ? 8 * g8 + 2 * mt : 16 * g8 + 128 * (mt >> 3) + 2 * (mt & 7);
}

// Four e4m3 bytes as two f16x2: bytes 0, 1 in lo, 2, 3 in hi (exact).
__device__ __forceinline__ void e4m3x4_to_f16(uint32_t w, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
      "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
#else
  lo = unpack_e4m3x2<f16_t>(w & 0xffffu);
  hi = unpack_e4m3x2<f16_t>(w >> 16);
#endif
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// A T pair as an f16 pair, saturated to the f16 range (identity for f16).
template <typename T>
__device__ __forceinline__ uint32_t to_f16x2(uint32_t u) {
  if constexpr (std::is_same_v<T, f16_t>) {
    return u;
  } else {
    const float2 f = unpack2<T>(u);
    constexpr float kMax = 65504.f;
    return pack2<f16_t>(fminf(fmaxf(f.x, -kMax), kMax), fminf(fmaxf(f.y, -kMax), kMax));
  }
}

template <typename T, typename C, int kHd>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const AttentionArgs a, const DecodePlan plan) {
  using L = DecodeLayout<kHd, C>;
  using M = std::conditional_t<L::kFp8, f16_t, T>;    // the products' dtype
  constexpr int kSteps = kHd / 16;                    // k-steps of K Qᵀ = m-tiles of Vᵀ Pᵀ
  constexpr int kIters = kKeys * L::kRawChunks / 32;  // 16-byte copies per lane per K (or V) tile
  constexpr int kRawElems = 16 / int{sizeof(C)};      // cache elements per 16-byte copy
  extern __shared__ __align__(128) unsigned char smem[];

  pdl_wait();
  pdl_launch_dependents();

  const int s = blockIdx.z / plan.passes, pass = blockIdx.z % plan.passes;
  const int kvh = blockIdx.y, split = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g8 = lane >> 2, t4 = lane & 3;  // the fragments' row group and thread in group
  const int group = a.heads / a.kv_heads;
  const int qpc = kCols / group;  // queries per pass
  const int q0 = a.query_start[s];
  const int q_len = a.query_start[s + 1] - q0;
  if (a.single_queries_only && q_len != 1) return;  // another kernel's rows
  if (pass * qpc >= q_len) return;                  // a shorter sequence: no queries here
  const int ctx = a.context_lens[s];
  const int step0 = ctx - q_len;  // cache index of the step's first token
  // The sequence's tree mask over its step tokens (bit i * q_len + j: token i sees token
  // j), or null: causal.
  const uint32_t* tree = a.tree_mask != nullptr && a.tree_mask_start[s] >= 0
                             ? a.tree_mask + a.tree_mask_start[s]
                             : nullptr;
  const int bs = a.block_size;
  const bool bs_pow2 = (bs & (bs - 1)) == 0;
  const int bs_shift = __ffs(bs) - 1;
  const bool general = a.softcap > 0.f || a.alibi_slopes != nullptr;
  const float scale_log2 = a.scale * kLog2e;
  const T* qkv = static_cast<const T*>(a.qkv);
  const C* kc = static_cast<const C*>(a.k_cache);
  const C* vc = static_cast<const C*>(a.v_cache);
  const int32_t* table = a.block_tables + int64_t{s} * a.max_blocks;
  unsigned char* wsm = smem + warp * L::kWarpBytes;
  const uint32_t wsm_a = smem_u32(wsm);
  float2* rec_ml = reinterpret_cast<float2*>(smem + L::kRecOffset);  // the cluster merge's
  float* rec_o = reinterpret_cast<float*>(rec_ml + kCols);

  for (int qt0 = pass * qpc; qt0 < q_len; qt0 += qpc * plan.passes) {
    const int n_q = min(qpc, q_len - qt0);
    const int n_cols = n_q * group;
    const int first_idx = ctx - q_len + qt0;  // cache index of the pass's first query
    // Keys [kb, ke) of this split that some query of the pass sees.
    int kb = a.sliding_window > 0 ? max(0, first_idx - a.sliding_window + 1) : 0;
    int ke = first_idx + n_q;
    if (plan.num_splits > 1) {
      // The pass's own keys split evenly, in multiples of kSplitUnit: a sequence shorter
      // than the context the plan was made for (the step's longest, a graph's bucket)
      // still gives each split of its cluster a share.
      const int per = (ke - kb + plan.num_splits - 1) / plan.num_splits;
      const int sk = (per + kSplitUnit - 1) / kSplitUnit * kSplitUnit;
      const int lo = kb + split * sk;
      ke = min(ke, lo + sk);
      kb = lo;  // kb >= ke: no keys for this split
    }
    const int t_first = kb / kKeys;
    const int n_tiles = ke > kb ? (ke + kKeys - 1) / kKeys - t_first : 0;
    const int n_mine = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;

    // Qᵀ as the B operand of Sᵀ = K Qᵀ: column g8, dims 16 k + 2 t4 (+1) and (+8, +9)
    // (fp8: the stored dims that K's fragments hold, as f16).
    uint32_t qf[kSteps][2];
    {
      const bool live = g8 < n_cols;
      const int qi = g8 / group;
      const int h = kvh * group + (g8 - qi * group);
      const int64_t base =
          live ? ((int64_t{q0} + qt0 + qi) * a.qkv_cols + int64_t{h} * kHd) / 2 : 0;
      const uint32_t* qp = reinterpret_cast<const uint32_t*>(qkv) + base;
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        if constexpr (L::kFp8) {
          const int pair = (16 * k_chunk<kHd>(k >> 2, t4) + 4 * (k & 3)) / 2;
          qf[k][0] = live ? to_f16x2<T>(qp[pair]) : 0u;
          qf[k][1] = live ? to_f16x2<T>(qp[pair + 1]) : 0u;
        } else {
          qf[k][0] = live ? qp[8 * k + t4] : 0u;
          qf[k][1] = live ? qp[8 * k + 4 + t4] : 0u;
        }
      }
    }
    // The accumulators' columns 2 t4 and 2 t4 + 1: their query's cache index, ALiBi slope.
    int col_idx[2];
    float col_slope[2] = {0.f, 0.f};
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int n = 2 * t4 + jj;
      const int qi = n / group;
      col_idx[jj] = first_idx + qi;
      if (a.alibi_slopes != nullptr) col_slope[jj] = a.alibi_slopes[kvh * group + (n - qi * group)];
    }

    float m2[2] = {-INFINITY, -INFINITY};  // running max per column (log2 units)
    float lsum[2] = {0.f, 0.f};            // this lane's share of the exp-sum per column
    float acc[kSteps][4];                  // Oᵀ: rows 16 mt + g8 (+8), columns 2 t4 (+1)
#pragma unroll
    for (int mt = 0; mt < kSteps; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][e] = 0.f;

    auto tile_key0 = [&](int j) { return (t_first + warp + kWarps * j) * kKeys; };
    // The block id for this lane's key (lane % 16) of the warp's tile j (-1 when not
    // needed or past the table) and the key's slot in its block. The table load is
    // issued an iteration before its use.
    auto fetch = [&](int j, int& blk, int& within) {
      blk = -1;
      within = 0;
      const int key = tile_key0(j) + (lane & 15);
      if (j < n_mine && key >= kb && key < ke) {
        int bi;
        if (bs_pow2) {
          bi = key >> bs_shift;
          within = key & (bs - 1);
        } else {
          bi = key / bs;
          within = key - bi * bs;
        }
        blk = bi < a.max_blocks ? __ldg(table + bi) : -1;
      }
    };
    // Queues the copies of tile j into `stage`; returns the tile's mask of keys with
    // data (bit i: key i is needed and its block id is valid).
    auto issue = [&](int j, int blk, int within, int stage) -> uint32_t {
      const int key = tile_key0(j) + (lane & 15);
      const bool need = j < n_mine && key >= kb && key < ke;
      const bool good = blk >= 0 && blk < a.num_blocks;
      if (__ballot_sync(0xffffffffu, need && !good) != 0u && lane == 0)
        report(a.err, kErrBlockTable);
      const int row = need && good ? (blk * a.kv_heads + kvh) * bs + within : -1;
      const uint32_t mask = __ballot_sync(0xffffffffu, row >= 0) & 0xffffu;
      if (j < n_mine) {
        // Consecutive lanes copy consecutive chunks of a row (whole 128-byte lines per
        // 8 lanes), the row's cache index taken from the lane that fetched its block.
        const uint32_t k_dst = wsm_a + static_cast<uint32_t>(stage * L::kStageBytes);
        const uint32_t v_dst = k_dst + L::kRawTileBytes;
#pragma unroll
        for (int i = 0; i < kIters; ++i) {
          const int q = i * 32 + lane;
          const int r = q / L::kRawChunks, c = q % L::kRawChunks;
          const int src = __shfl_sync(0xffffffffu, row, r);
          const int64_t off = src >= 0 ? int64_t{src} * kHd + c * kRawElems : 0;
          const uint32_t dst = L::kFp8 ? raw_offset<kHd>(r, c) : tile_offset<kHd>(r, c);
          cp_async16(k_dst + dst, kc + off, src >= 0);
          cp_async16(v_dst + dst, vc + off, src >= 0);
        }
      }
      return mask;
    };
    auto compute = [&](int j, int stage, uint32_t mask) {
      [[maybe_unused]] const uint32_t k_s = wsm_a + static_cast<uint32_t>(stage * L::kStageBytes);
      [[maybe_unused]] const uint32_t v_s = k_s + L::kRawTileBytes;
      [[maybe_unused]] const unsigned char* k_raw = wsm + stage * L::kStageBytes;
      [[maybe_unused]] const unsigned char* v_raw = k_raw + L::kRawTileBytes;
      // Sᵀ = K Qᵀ, even and odd k-steps in two accumulators (a shorter chain).
      float sa[4] = {0.f, 0.f, 0.f, 0.f}, sb[4] = {0.f, 0.f, 0.f, 0.f};
      if constexpr (L::kFp8) {
        // Rows g8 and g8 + 8, the lane's chunks: 4 k-steps a chunk.
        constexpr int kKc = kHd / 64;
        uint4 kw[kKc][2];
#pragma unroll
        for (int i = 0; i < kKc; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            kw[i][h] = *reinterpret_cast<const uint4*>(
                k_raw + raw_offset<kHd>(g8 + 8 * h, k_chunk<kHd>(i, t4)));
#pragma unroll
        for (int k = 0; k < kSteps; ++k) {
          uint32_t af[4];
          e4m3x4_to_f16(word_of(kw[k >> 2][0], k & 3), af[0], af[2]);
          e4m3x4_to_f16(word_of(kw[k >> 2][1], k & 3), af[1], af[3]);
          if (k & 1)
            mma_16816<M>(sb, af, qf[k][0], qf[k][1]);
          else
            mma_16816<M>(sa, af, qf[k][0], qf[k][1]);
        }
      } else {
        const int r = lane & 15;
#pragma unroll
        for (int k = 0; k < kSteps; ++k) {
          uint32_t af[4];
          ldsm_x4(k_s + tile_offset<kHd>(r, 2 * k + (lane >> 4)), af);
          if (k & 1)
            mma_16816<M>(sb, af, qf[k][0], qf[k][1]);
          else
            mma_16816<M>(sa, af, qf[k][0], qf[k][1]);
        }
      }
      // Element e: key g8 + 8 (e / 2) of the tile, column 2 t4 + e % 2.
      const int key0 = tile_key0(j);
      float sc[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int jj = e & 1, kr = g8 + 8 * (e >> 1);
        const int key = key0 + kr;
        bool ok = ((mask >> kr) & 1u) != 0u && key <= col_idx[jj] &&
                  (a.sliding_window <= 0 || key > col_idx[jj] - a.sliding_window);
        if (tree != nullptr && ok && key >= step0) {
          // A live column's query (col_idx < ctx) and one of the step's own keys.
          const int64_t bit = int64_t{col_idx[jj] - step0} * q_len + (key - step0);
          ok = col_idx[jj] < ctx && ((tree[bit >> 5] >> (bit & 31)) & 1u) != 0u;
        }
        float x = sa[e] + sb[e];
        if (general) {
          x *= a.scale;
          if (a.softcap > 0.f) x = a.softcap * tanhf(x / a.softcap);
          if (a.alibi_slopes != nullptr) {
            float b = col_slope[jj] * static_cast<float>(key);
            if (a.alibi_bias_bf16) b = round_to<bf16_t>(b);
            x += a.alibi_scale * b;
          }
          x *= kLog2e;
        } else {
          x *= scale_log2;
        }
        sc[e] = ok ? x : -INFINITY;
      }
      // Online softmax; a column's 16 keys are spread over the 8 lanes of one t4. A
      // column's reference max m2 moves only when a tile's max passes it by more than
      // kRescaleLog2 (then O and l are rescaled, for every column of the warp at once):
      // until then P runs up to 2^kRescaleLog2, well inside the products' range, and
      // most tiles skip the rescale.
      constexpr float kRescaleLog2 = 8.f;
      float mx[2];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        mx[jj] = fmaxf(sc[jj], sc[jj + 2]);
        mx[jj] = fmaxf(mx[jj], __shfl_xor_sync(0xffffffffu, mx[jj], 4));
        mx[jj] = fmaxf(mx[jj], __shfl_xor_sync(0xffffffffu, mx[jj], 8));
        mx[jj] = fmaxf(mx[jj], __shfl_xor_sync(0xffffffffu, mx[jj], 16));
      }
      const bool grow0 = mx[0] > m2[0] + kRescaleLog2, grow1 = mx[1] > m2[1] + kRescaleLog2;
      if (__any_sync(0xffffffffu, grow0 || grow1)) {
        float alpha[2];
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const bool grow = jj == 0 ? grow0 : grow1;
          const float m_new = grow ? mx[jj] : m2[jj];
          alpha[jj] = grow ? ex2(m2[jj] - m_new) : 1.f;  // m2 = -inf: 0
          m2[jj] = m_new;
        }
        lsum[0] *= alpha[0];
        lsum[1] *= alpha[1];
#pragma unroll
        for (int mt = 0; mt < kSteps; ++mt) {
          acc[mt][0] *= alpha[0];
          acc[mt][1] *= alpha[1];
          acc[mt][2] *= alpha[0];
          acc[mt][3] *= alpha[1];
        }
      }
      float p[4];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const float m_use = m2[jj] == -INFINITY ? 0.f : m2[jj];
        p[jj] = ex2(sc[jj] - m_use);
        p[jj + 2] = ex2(sc[jj + 2] - m_use);
      }
      const uint32_t p_lo = pack2<M>(p[0], p[1]);  // key g8: columns 2 t4, 2 t4 + 1
      const uint32_t p_hi = pack2<M>(p[2], p[3]);  // key g8 + 8
      const float2 r_lo = unpack2<M>(p_lo), r_hi = unpack2<M>(p_hi);
      lsum[0] += r_lo.x + r_hi.x;
      lsum[1] += r_lo.y + r_hi.y;
      // Pᵀ as the B operand (keys 2 t4 (+1) and (+8, +9), column g8).
      const uint32_t pb0 = movmatrix_trans(p_lo), pb1 = movmatrix_trans(p_hi);
      if constexpr (L::kFp8) {
        // Oᵀ += Vᵀ Pᵀ: the lane's bytes of keys 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 (the
        // A operand's columns), 16 consecutive dims a chunk (8 at head_dim 64); m-tile
        // mt takes bytes 2 (mt % 8), +1 of them (v_dim0), paired across two keys.
        constexpr int kVw = kHd / 32;  // 32-bit words per key
        uint32_t vw[4][kVw];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int vr = 2 * t4 + (e & 1) + 8 * (e >> 1);
          if constexpr (kHd == 64) {
            const uint2 w = *reinterpret_cast<const uint2*>(v_raw + raw_offset<kHd>(vr, g8 >> 1) +
                                                            8 * (g8 & 1));
            vw[e][0] = w.x;
            vw[e][1] = w.y;
          } else {
#pragma unroll
            for (int h = 0; h < kHd / 128; ++h) {
              const uint4 w =
                  *reinterpret_cast<const uint4*>(v_raw + raw_offset<kHd>(vr, g8 + 8 * h));
              vw[e][4 * h] = w.x;
              vw[e][4 * h + 1] = w.y;
              vw[e][4 * h + 2] = w.z;
              vw[e][4 * h + 3] = w.w;
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < kSteps; ++mt) {
          const uint32_t sel = (mt & 1) ? 0x7362u : 0x5140u;
          uint32_t af[4];
          e4m3x4_to_f16(__byte_perm(vw[0][mt >> 1], vw[1][mt >> 1], sel), af[0], af[1]);
          e4m3x4_to_f16(__byte_perm(vw[2][mt >> 1], vw[3][mt >> 1], sel), af[2], af[3]);
          mma_16816<M>(acc[mt], af, pb0, pb1);
        }
      } else {
        // Oᵀ += Vᵀ Pᵀ: matrix i of ldmatrix.trans is keys 8 (i / 2).., dims 8 (i % 2)..
        const int vr = (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
        for (int mt = 0; mt < kSteps; ++mt) {
          uint32_t af[4];
          ldsm_x4_trans(v_s + tile_offset<kHd>(vr, 2 * mt + ((lane >> 3) & 1)), af);
          mma_16816<M>(acc[mt], af, pb0, pb1);
        }
      }
    };

    // The pipeline: kStages - 1 tiles queued ahead of the one computed, and the block
    // ids of the next kAhead tiles to queue loaded ahead of that (a table load issued
    // only one tile ahead of its use would put its latency on every tile's path).
    constexpr int kAhead = 4;
    uint32_t vm[L::kStages];     // key masks of the tiles in flight, oldest first
    int qb[kAhead], qw[kAhead];  // block id and slot of tiles kStages - 1 + j + i
    {
      int pb[L::kStages - 1], pw[L::kStages - 1];
#pragma unroll
      for (int i = 0; i < L::kStages - 1; ++i) fetch(i, pb[i], pw[i]);
#pragma unroll
      for (int i = 0; i < kAhead; ++i) fetch(L::kStages - 1 + i, qb[i], qw[i]);
#pragma unroll
      for (int i = 0; i < L::kStages - 1; ++i) {
        vm[i] = issue(i, pb[i], pw[i], i);
        cp_async_commit();
      }
    }
    for (int j = 0; j < n_mine; ++j) {
      const int blk = qb[0], within = qw[0];
#pragma unroll
      for (int i = 0; i + 1 < kAhead; ++i) {
        qb[i] = qb[i + 1];
        qw[i] = qw[i + 1];
      }
      fetch(j + L::kStages - 1 + kAhead, qb[kAhead - 1], qw[kAhead - 1]);
      __syncwarp();  // every lane is done with the stage refilled below (tile j - 1's)
      vm[L::kStages - 1] =
          issue(j + L::kStages - 1, blk, within, (j + L::kStages - 1) % L::kStages);
      cp_async_commit();
      cp_async_wait<L::kStages - 1>();  // this lane's copies of tile j have landed
      __syncwarp();                     // and every lane's
      compute(j, j % L::kStages, vm[0]);
#pragma unroll
      for (int i = 0; i < L::kStages - 1; ++i) vm[i] = vm[i + 1];
    }
    cp_async_wait<0>();
    __syncwarp();

    // The warp's record: m, l (summed over the 8 lanes of a column) and O.
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      lsum[jj] += __shfl_xor_sync(0xffffffffu, lsum[jj], 4);
      lsum[jj] += __shfl_xor_sync(0xffffffffu, lsum[jj], 8);
      lsum[jj] += __shfl_xor_sync(0xffffffffu, lsum[jj], 16);
    }
    float* w_m = reinterpret_cast<float*>(wsm);
    float* w_l = w_m + kCols;
    float* w_o = w_l + kCols;
    if (g8 == 0) {
      w_m[2 * t4] = m2[0];
      w_m[2 * t4 + 1] = m2[1];
      w_l[2 * t4] = lsum[0];
      w_l[2 * t4 + 1] = lsum[1];
    }
#pragma unroll
    for (int mt = 0; mt < kSteps; ++mt) {
      // Rows g8 and g8 + 8 of m-tile mt: dims d and d + 8 (fp8: v_dim0 and the next).
      const int d = L::kFp8 ? v_dim0<kHd>(mt, g8) : 16 * mt + g8;
      const int d2 = L::kFp8 ? d + 1 : d + 8;
      w_o[(2 * t4) * L::kLdo + d] = acc[mt][0];
      w_o[(2 * t4 + 1) * L::kLdo + d] = acc[mt][1];
      w_o[(2 * t4) * L::kLdo + d2] = acc[mt][2];
      w_o[(2 * t4 + 1) * L::kLdo + d2] = acc[mt][3];
    }
    __syncthreads();

    // Merge the warps: out (one split) or the split's partial.
    for (int i = threadIdx.x; i < n_cols * kHd; i += kThreads) {
      const int n = i / kHd, d = i % kHd;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float* rec = reinterpret_cast<const float*>(smem + w * L::kWarpBytes);
        if (rec[kCols + n] > 0.f) mx = fmaxf(mx, rec[n]);
      }
      float l_all = 0.f, o = 0.f;
      if (mx != -INFINITY) {
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const float* rec = reinterpret_cast<const float*>(smem + w * L::kWarpBytes);
          if (rec[kCols + n] > 0.f) {
            const float f = ex2(rec[n] - mx);
            l_all += f * rec[kCols + n];
            o += f * rec[2 * kCols + n * L::kLdo + d];
          }
        }
      }
      const int qi = n / group;
      const int64_t tok = int64_t{q0} + qt0 + qi;
      const int h = kvh * group + (n - qi * group);
      if (plan.num_splits == 1) {
        static_cast<T*>(a.out)[(tok * a.heads + h) * kHd + d] =
            from_f<T>(l_all > 0.f ? o / l_all : 0.f);
      } else if (plan.cluster) {
        rec_o[n * kHd + d] = o;
        if (d == 0) rec_ml[n] = make_float2(mx, l_all);  // log2 units
      } else {
        const int64_t row = (int64_t{split} * a.tokens + tok) * a.heads + h;
        plan.part_o[row * kHd + d] = o;
        if (d == 0) {
          plan.part_ml[2 * row] = mx * kLn2;  // the merge works in natural-log units
          plan.part_ml[2 * row + 1] = l_all;
        }
      }
    }
    if (plan.cluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
      __trap();  // clusters need sm_90; the host plans them only where they launch
#else
      // Every split's record is in its block's shared memory; the cluster's blocks share
      // out the pass's outputs, each reading all the records through DSMEM.
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();
      const int n_splits = plan.num_splits;
      const int rank = static_cast<int>(cluster.block_rank());
      for (int i = rank * kThreads + threadIdx.x; i < n_cols * kHd; i += n_splits * kThreads) {
        const int n = i / kHd, d = i % kHd;
        float mx = -INFINITY;
        for (int r = 0; r < n_splits; ++r) {
          const float2 ml = *cluster.map_shared_rank(rec_ml + n, r);
          if (ml.y > 0.f) mx = fmaxf(mx, ml.x);
        }
        float l_all = 0.f, o = 0.f;
        if (mx != -INFINITY) {
          for (int r = 0; r < n_splits; ++r) {
            const float2 ml = *cluster.map_shared_rank(rec_ml + n, r);
            if (ml.y > 0.f) {
              const float f = ex2(ml.x - mx);
              l_all += f * ml.y;
              o += f * *cluster.map_shared_rank(rec_o + n * kHd + d, r);
            }
          }
        }
        const int qi = n / group;
        const int64_t tok = int64_t{q0} + qt0 + qi;
        const int h = kvh * group + (n - qi * group);
        static_cast<T*>(a.out)[(tok * a.heads + h) * kHd + d] =
            from_f<T>(l_all > 0.f ? o / l_all : 0.f);
      }
      cluster.sync();  // the records stay until every block of the cluster has read them
#endif
    }
    __syncthreads();  // the records are overwritten by the next pass's copies
  }
  if (plan.num_splits == 1 || plan.cluster || plan.counters == nullptr) return;

  // The last split of (s, kvh) to finish merges the pair's rows (tokens q0.., heads of
  // the group), a warp per row.
  // (One pass per block: the launch makes as many passes as the longest sequence needs.)
  if (!last_block_arrives(plan.counters + (int64_t{s} * plan.passes + pass) * a.kv_heads + kvh,
                          plan.num_splits))
    return;
  const int64_t rows = a.tokens * a.heads;
  const int pass_q = min(qpc, q_len - pass * qpc);
  for (int r = warp; r < pass_q * group; r += kWarps) {
    const int qi = pass * qpc + r / group;
    const int64_t row = (int64_t{q0} + qi) * a.heads + kvh * group + r % group;
    merge_split_row<T>(plan.part_o, plan.part_ml, plan.num_splits, rows, row, kHd,
                       static_cast<T*>(a.out), lane);
  }
}

// Runs f.template operator()<T, C, kHd>() for the arguments' dtype, cache element type
// (T, or e4m3 bytes) and head_dim.
template <typename F>
void with_kernel(const AttentionArgs& a, F&& f) {
  auto by_hd = [&]<typename T, typename C>() {
    if (a.head_dim == 64)
      f.template operator()<T, C, 64>();
    else if (a.head_dim == 128)
      f.template operator()<T, C, 128>();
    else
      f.template operator()<T, C, 256>();
  };
  auto by_cache = [&]<typename T>() {
    if (a.kv_fp8)
      by_hd.template operator()<T, kv_fp8_t>();
    else
      by_hd.template operator()<T, T>();
  };
  if (a.type == DType::kBF16)
    by_cache.template operator()<bf16_t>();
  else
    by_cache.template operator()<f16_t>();
}

// Blocks of decode_kernel<T, C, kHd> resident per SM.
template <typename T, typename C, int kHd>
int blocks_per_sm() {
  static const int blocks = [] {
    constexpr int kBytes = DecodeLayout<kHd, C>::kBytes;
    allow_dynamic_smem(reinterpret_cast<const void*>(decode_kernel<T, C, kHd>), kBytes);
    int n = 0;
    TACHYON_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_kernel<T, C, kHd>,
                                                                     kThreads, kBytes));
    return std::max(n, 1);
  }();
  return blocks;
}

constexpr int kMaxClusterSplits = 16;  // the largest (non-portable) cluster on sm_90

// Blocks of decode_kernel<T, C, kHd> resident on the device when they run as clusters
// of `splits` (0: such clusters cannot launch). Asked once per size.
template <typename T, typename C, int kHd>
int64_t cluster_slots(int splits) {
  static std::atomic<int> known[kMaxClusterSplits + 1];  // clusters + 1; 0: not asked yet
  if (splits < 2 || splits > kMaxClusterSplits) return 0;
  const int v = known[splits].load(std::memory_order_relaxed);
  if (v != 0) return int64_t{v - 1} * splits;
  const void* kernel = reinterpret_cast<const void*>(decode_kernel<T, C, kHd>);
  constexpr int kBytes = DecodeLayout<kHd, C>::kBytes;
  allow_dynamic_smem(kernel, kBytes);
  int clusters = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
      cudaSuccess) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(splits), 1, 1);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kBytes;
    cudaLaunchAttribute attr = cluster_attribute(dim3(static_cast<unsigned>(splits), 1, 1));
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) clusters = 0;
  }
  (void)cudaGetLastError();  // a refused query leaves no error behind
  known[splits].store(clusters + 1, std::memory_order_relaxed);
  return int64_t{clusters} * splits;
}

template <typename C>
int layout_bytes_for(int head_dim) {
  return head_dim == 64    ? DecodeLayout<64, C>::kBytes
         : head_dim == 128 ? DecodeLayout<128, C>::kBytes
                           : DecodeLayout<256, C>::kBytes;
}

int layout_bytes(int head_dim, bool kv_fp8) {
  return kv_fp8 ? layout_bytes_for<kv_fp8_t>(head_dim) : layout_bytes_for<bf16_t>(head_dim);
}

// The modelled time (µs) of a plan of `splits` key splits of `keys` each. Items
// (split, KV head, sequence) run in waves of `slots` resident blocks; a wave streams at
// the lesser of the device bandwidth and what its blocks keep in flight, plus a start-up
// latency. Splitting adds the merge: through global memory, the last block's (or a
// kernel's) latency and the partials' traffic; in a cluster, the blocks read one
// another's shared memory. Constants: H200-class bandwidth per SM and loaded memory
// latency.
double plan_time(int64_t pairs, int64_t splits, int64_t keys, int64_t slots, int num_sms,
                 int64_t key_bytes, int64_t rows_per_item, int head_dim, bool cluster, int stages) {
  constexpr double kBwPerSm = 30e3;      // bytes per µs (about 4 TB/s over 132 SMs)
  constexpr double kLatency = 3.0;       // µs, memory latency under load (conservative)
  constexpr double kStartup = 1.0;       // µs per wave: metadata and first tiles
  constexpr double kMerge = 2.0;         // µs: the global merge's latency (last block or kernel)
  constexpr double kClusterMerge = 0.5;  // µs: two cluster barriers and the DSMEM reads
  const double bw = kBwPerSm * std::max(num_sms, 1);
  const double in_flight = double{kWarps} * (stages - 1) * kKeys * key_bytes;
  const double block_rate = in_flight / kLatency;
  const int64_t items = pairs * splits;
  const double item_bytes = double(keys) * double(key_bytes);
  auto wave = [&](int64_t n) {
    return std::max(double(n) * item_bytes / bw, item_bytes / block_rate) + kStartup;
  };
  double t = double(items / slots) * wave(slots) + (items % slots ? wave(items % slots) : 0.0);
  if (splits > 1 && cluster) t += kClusterMerge;
  if (splits > 1 && !cluster)
    t += kMerge + 2.0 * double(items) * double(rows_per_item) * (head_dim + 2) * 4.0 / bw;
  return t;
}

struct SplitChoice {
  int splits = 1;
  bool cluster = false;
};

// The plan with the least modelled time: 1..kMaxSplits splits merged through global
// memory, or 2..16 as clusters where `cluster_slots(splits)` (resident blocks in
// clusters of that size; 0: none) says they launch.
template <typename ClusterSlots>
SplitChoice choose_splits(int64_t pairs, int64_t ctx, int64_t slots, int num_sms, int64_t key_bytes,
                          int64_t rows_per_item, int head_dim, int stages,
                          ClusterSlots&& cluster_slots) {
  const int64_t max_splits =
      std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, (ctx + kSplitUnit - 1) / kSplitUnit));
  double best_t = INFINITY;
  SplitChoice best;
  for (int64_t s = 1; s <= max_splits; ++s) {
    int64_t keys = (ctx + s - 1) / s;
    keys = (keys + kSplitUnit - 1) / kSplitUnit * kSplitUnit;
    const int64_t splits = (ctx + keys - 1) / keys;
    if (splits != s) continue;  // the same split size as a smaller count
    for (const bool cluster : {false, true}) {
      int64_t n_slots = slots;
      if (cluster) {
        if (splits < 2 || splits > kMaxClusterSplits) continue;
        n_slots = cluster_slots(static_cast<int>(splits));
        if (n_slots <= 0) continue;
      }
      const double t = plan_time(pairs, splits, keys, n_slots, num_sms, key_bytes, rows_per_item,
                                 head_dim, cluster, stages);
      if (t < best_t) {
        best_t = t;
        best = SplitChoice{static_cast<int>(splits), cluster};
      }
    }
  }
  return best;
}

// Query passes per sequence: the longest sequence's queries, 8 / group at a time.
int64_t decode_passes(const AttentionArgs& a) {
  const int group = a.heads / std::max(a.kv_heads, 1);
  const int qpc = std::max(kCols / std::max(group, 1), 1);
  return std::max<int64_t>(1, (int64_t{a.max_query_len} + qpc - 1) / qpc);
}

}  // namespace

void set_decode_cluster_merge(bool on) {
  g_cluster_merge.store(on, std::memory_order_relaxed);
}

bool decode_cluster_merge() {
  return g_cluster_merge.load(std::memory_order_relaxed);
}

bool attention_decode_supports(const AttentionArgs& a) {
  if (a.type != DType::kBF16 && a.type != DType::kF16) return false;
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) return false;
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.heads / a.kv_heads > kCols) return false;
  if (a.num_seqs * decode_passes(a) > 65535 || a.kv_heads > 65535 || a.block_size <= 0)
    return false;
  // Cache rows are indexed in 32 bits; 16-byte copies need aligned caches, and the
  // query pairs 4-byte aligned rows.
  if (int64_t{a.num_blocks} * a.kv_heads * a.block_size > INT_MAX) return false;
  if ((reinterpret_cast<uintptr_t>(a.k_cache) | reinterpret_cast<uintptr_t>(a.v_cache)) % 16 != 0)
    return false;
  if (reinterpret_cast<uintptr_t>(a.qkv) % 4 != 0 || a.qkv_cols % 2 != 0) return false;
  return layout_bytes(a.head_dim, a.kv_fp8) <= max_dynamic_smem();
}

AttentionPlan plan_attention_decode(const AttentionArgs& a, int num_sms) {
  AttentionPlan p;
  p.q_tile = 1;
  const int64_t pairs = int64_t{a.kv_heads} * a.num_seqs * decode_passes(a);
  const int64_t ctx = std::max<int64_t>(a.max_context_len, 1);
  const int64_t key_bytes =
      int64_t{2} * a.head_dim * (a.kv_fp8 ? 1 : static_cast<int64_t>(dtype_size(a.type)));
  const int64_t rows_per_item = std::min<int64_t>(
      kCols, int64_t{a.heads / std::max(a.kv_heads, 1)} * std::max<int64_t>(1, a.max_query_len));
  // The choice is the same for every layer of a step: remember the last one.
  struct Memo {
    int64_t pairs = -1, ctx = -1, key_bytes = -1, rows = -1;
    int num_sms = -1, head_dim = -1;
    DType type = DType::kF32;
    bool allow_cluster = false;
    int splits = 1;
    bool cluster = false;
  };
  thread_local Memo memo;
  const bool allow_cluster = decode_cluster_merge();
  if (memo.pairs != pairs || memo.ctx != ctx || memo.key_bytes != key_bytes ||
      memo.rows != rows_per_item || memo.num_sms != num_sms || memo.head_dim != a.head_dim ||
      memo.type != a.type || memo.allow_cluster != allow_cluster) {
    int occupancy = 1;
    const bool known = (a.type == DType::kBF16 || a.type == DType::kF16) &&
                       (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256);
    if (known)
      with_kernel(
          a, [&]<typename T, typename C, int kHd>() { occupancy = blocks_per_sm<T, C, kHd>(); });
    memo = Memo{pairs, ctx, key_bytes, rows_per_item, num_sms, a.head_dim, a.type, allow_cluster};
    auto slots_in_clusters = [&](int splits) {
      int64_t n = 0;
      if (known && allow_cluster)
        with_kernel(
            a, [&]<typename T, typename C, int kHd>() { n = cluster_slots<T, C, kHd>(splits); });
      return n;
    };
    const SplitChoice c =
        choose_splits(pairs, ctx, int64_t{std::max(num_sms, 1)} * occupancy, num_sms, key_bytes,
                      rows_per_item, a.head_dim, stages_for(a.kv_fp8), slots_in_clusters);
    memo.splits = c.splits;
    memo.cluster = c.cluster;
  }
  const int64_t splits = memo.splits;
  const int64_t keys = (ctx + splits - 1) / splits;
  p.num_splits = static_cast<int>(splits);
  p.split_keys = splits > 1 ? static_cast<int>((keys + kSplitUnit - 1) / kSplitUnit * kSplitUnit)
                            : INT_MAX / 2;
  p.smem_bytes = static_cast<size_t>(layout_bytes(a.head_dim, a.kv_fp8));
  p.cluster = memo.cluster;
  if (splits > 1 && !p.cluster)
    p.scratch_bytes = static_cast<size_t>(splits) * static_cast<size_t>(a.tokens) *
                      static_cast<size_t>(a.heads) * static_cast<size_t>(a.head_dim + 2) *
                      sizeof(float);
  return p;
}

void launch_attention_decode(const AttentionArgs& a, const AttentionPlan& p, void* scratch,
                             int* counters, int64_t num_counters, cudaStream_t stream) {
  if (a.tokens == 0 || a.num_seqs == 0) return;
  TACHYON_KERNEL_CHECK(attention_decode_supports(a), "attention_decode: unsupported arguments");
  TACHYON_KERNEL_CHECK(p.num_splits >= 1 && (p.num_splits == 1 || p.split_keys > 0),
                       "attention_decode: bad plan");
  const bool cluster = p.cluster && p.num_splits > 1 && p.num_splits <= kMaxClusterSplits;
  const int64_t passes = decode_passes(a);
  DecodePlan dp{p.num_splits, static_cast<int>(passes), nullptr, nullptr, nullptr, cluster};
  if (p.num_splits > 1 && !cluster) {
    TACHYON_KERNEL_CHECK(scratch != nullptr, "attention_decode: split-K needs scratch");
    dp.part_o = static_cast<float*>(scratch);
    dp.part_ml = dp.part_o + static_cast<size_t>(p.num_splits) * a.tokens * a.heads * a.head_dim;
    if (int64_t{a.num_seqs} * passes * a.kv_heads <= num_counters) dp.counters = counters;
  }
  with_kernel(a, [&]<typename T, typename C, int kHd>() {
    using L = DecodeLayout<kHd, C>;
    allow_dynamic_smem(reinterpret_cast<const void*>(decode_kernel<T, C, kHd>), L::kBytes);
    const dim3 grid(static_cast<unsigned>(p.num_splits), static_cast<unsigned>(a.kv_heads),
                    static_cast<unsigned>(a.num_seqs * passes));
    if (cluster) {
      static std::atomic<uint64_t> allowed{0};  // bit d: clusters above 8 allowed on device d
      int dev = 0;
      TACHYON_CUDA_CHECK(cudaGetDevice(&dev));
      const uint64_t bit = uint64_t{1} << (dev & 63);
      if ((allowed.load(std::memory_order_relaxed) & bit) == 0) {
        TACHYON_CUDA_CHECK(
            cudaFuncSetAttribute(reinterpret_cast<const void*>(decode_kernel<T, C, kHd>),
                                 cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        allowed.fetch_or(bit, std::memory_order_relaxed);
      }
      launch_kernel_clustered(decode_kernel<T, C, kHd>, grid, dim3(kThreads), L::kBytes, stream,
                              dim3(static_cast<unsigned>(p.num_splits), 1, 1), a, dp);
      return;
    }
    launch_kernel(decode_kernel<T, C, kHd>, grid, dim3(kThreads), L::kBytes, stream, a, dp);
    if (p.num_splits > 1 && dp.counters == nullptr) {
      const int64_t rows = a.tokens * a.heads;
      launch_kernel(combine_splits_kernel<T>, dim3(ceil_div(rows, 4)), dim3(128), 0, stream,
                    static_cast<const float*>(dp.part_o), static_cast<const float*>(dp.part_ml),
                    p.num_splits, a.tokens, static_cast<int>(a.heads), static_cast<int>(a.head_dim),
                    static_cast<T*>(a.out));
    }
  });
}

}  // namespace tachyon::cuda
