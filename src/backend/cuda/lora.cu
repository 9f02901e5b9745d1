// Low-rank adapters (multi-LoRA, backend/ops.h's lora()): out[t] += B_s · (A_s · x[t]) for
// the arena slot s of each token, in two kernels. The shrink writes f32 partial products
// s = A_s · x[t] per token and part; the expand sums them, multiplies by B_s and adds the
// result to out, rounded once.
//
// Tokens are handled in groups that share a slot, so that each slot's A and B rows are
// read once per group rather than once per token. The grid is sized from host-known
// shapes alone (capturable in graphs; row_slots and ranks stay on the device):
//  - T <= kGroupedRows (decode steps): group g of the grid is the g-th distinct slot of
//    the step (in order of first appearance), min(T, slots) groups; groups past the
//    number of distinct slots exit at once. The shrink splits K into kChunk pieces (one
//    warp per A row and piece) so that a batch of one still spreads over many warps.
//  - T > kGroupedRows (prefill): group g is the tile of kTile consecutive tokens, and the
//    block takes its distinct slots in turn (a prompt's tokens share one). The shrink and
//    the expand (lora_prefill.cu) run on the tensor cores (mma.sync m16n8k16, f32
//    accumulators) in bf16 and f16; f32 activations (no tensor-core form here) take the
//    grouped kernels over the tiles.
// Each kernel finds its group, and loads the slot's ranks and rows, before its dependency
// wait (lora_device.cuh): at a decode step that overlaps the kernel before, and only x,
// the shrunk rows and the outputs are waited for. Rows of the base model (slot -1) are
// left untouched; a slot past the arena or a rank past the capacity R sets kErrLoraSlot in
// the device error word and that token is left untouched too.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/lora_device.cuh"
#include "backend/cuda/lora_kernels.h"
#include "backend/cuda/mma_util.cuh"

namespace tachyon::cuda {
namespace lora {
namespace {

constexpr int kChunk = 2048;         // K elements per warp in the grouped shrink
constexpr int kBatch = 1;            // tokens whose x pieces a grouped-shrink warp loads at once
constexpr int kShrinkWarps = 8;      // A rows per block in the grouped shrink
constexpr int kExpandThreads = 256;  // threads of an expand block

// Elements of T in a 16-byte piece, and element e (a constant after unrolling) of one.
template <typename T>
constexpr int kPiece = 16 / static_cast<int>(sizeof(T));

template <typename T>
__device__ __forceinline__ float piece_elem(const uint4& v, int e) {
  const uint32_t w = e / (kPiece<T> / 4) == 0   ? v.x
                     : e / (kPiece<T> / 4) == 1 ? v.y
                     : e / (kPiece<T> / 4) == 2 ? v.z
                                                : v.w;
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(w);
  } else {
    const float2 f = unpack2<T>(w);
    return e % 2 == 0 ? f.x : f.y;
  }
}

template <typename T>
__device__ __forceinline__ float dot_piece(const uint4& a, const uint4& b, float acc) {
#pragma unroll
  for (int e = 0; e < kPiece<T>; ++e) acc = fmaf(piece_elem<T>(a, e), piece_elem<T>(b, e), acc);
  return acc;
}

// The grouped shrink (T <= kGroupedRows; every T for f32): block (group, row block, K
// piece); warp w takes A row blockIdx.y * kShrinkWarps + w (part p = row / R, rank row j
// = row % R) over the K piece, holds it in registers and multiplies it with the x piece
// of every token of the group. part[(z * T + t) * P R + row] = that partial sum (for
// j < the slot's rank). The first group's A row and rank are loaded before the wait.
template <typename T>
__global__ void __launch_bounds__(kShrinkWarps * 32, 2)
    lora_shrink_grouped(LoraShape sh, const T* __restrict__ x, const T* __restrict__ arena,
                        float* __restrict__ part, int* err) {
  pdl_launch_dependents();
  const GroupRange gr = group_range(sh.t);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pr = sh.parts * sh.r;
  const int row = blockIdx.y * kShrinkWarps + warp;
  const int p = row / sh.r, j = row % sh.r;
  constexpr int kE = kPiece<T>, kPer = kChunk / kE / 32;  // 16-byte pieces per lane
  const int pieces = static_cast<int>(sh.k / kE);
  const int p0 = blockIdx.z * (kChunk / kE);
  TileSlots ts = load_tile_slots(sh.row_slots, gr.t0, gr.n, sh.slots, err,
                                 warp == 0 && blockIdx.y == 0 && blockIdx.z == 0);
  uint64_t mask = 0;
  int slot = gr.grouped ? nth_slot(ts, static_cast<int>(blockIdx.x), mask) : next_slot(ts, mask);
  if (row >= pr) slot = -1;  // warp-uniform
  bool waited = false;
  for (; slot >= 0; slot = gr.grouped ? -1 : next_slot(ts, mask)) {
    const uint4* a = reinterpret_cast<const uint4*>(arena + slot * sh.row_elems + sh.a_offset +
                                                    static_cast<int64_t>(row) * sh.k);
    uint4 av[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int q = p0 + lane + 32 * u;
      av[u] = q < pieces ? __ldg(a + q) : make_uint4(0, 0, 0, 0);
    }
    // Rows past the rank are computed, not stored.
    const bool keep = j < part_rank(sh.ranks, sh.entries, slot, sh.rank_index + p, sh.r, err);
    if (!waited) {
      pdl_wait();
      waited = true;
    }
    // kBatch tokens' x pieces in flight at once (the last token again past the group).
    uint64_t rest = mask;
    int last = 0;
    while (rest != 0) {
      int tk[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        tk[b] = rest != 0 ? pop_token(rest) : -1;
        last = tk[b] >= 0 ? tk[b] : last;
      }
      uint4 xv[kBatch][kPer];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const uint4* xr =
            reinterpret_cast<const uint4*>(x + (gr.t0 + (tk[b] >= 0 ? tk[b] : last)) * sh.k);
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
          const int q = p0 + lane + 32 * u;
          xv[b][u] = q < pieces ? __ldg(xr + q) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        float acc = 0.f;
#pragma unroll
        for (int u = 0; u < kPer; ++u) acc = dot_piece<T>(av[u], xv[b][u], acc);
        acc = warp_sum(acc);
        if (keep && lane == 0 && tk[b] >= 0)
          part[(blockIdx.z * sh.t + gr.t0 + tk[b]) * pr + row] = acc;
      }
    }
  }
  if (!waited) pdl_wait();  // the grid completes after the kernels before it
}

// The tiled shrink (T > kGroupedRows) on the tensor cores: block (tile of kShrinkTile
// tokens, part p: blockIdx.x = tile * P + p), 8 warps: warp w takes 16 tokens (w % 2)
// and a quarter of K (w / 2, in turns of 32 elements); per distinct slot u of the tile,
// D [16 tokens, R] = x · A_u[p R :, :]ᵀ, the quarters summed in shared memory and written
// for the tokens of slot u. The k index of the mma is a permutation of K that lets each
// lane load 8 consecutive elements of a row (16 bytes) per 32 of K: its elements 2i,
// 2i + 1 go to the (i % 2)-th register of the (i / 2)-th mma, for x and A alike.
constexpr int kShrinkTile = 32, kKSplit = 4, kTiledWarps = kShrinkTile / 16 * kKSplit;
constexpr int kSteps = 4;  // 32-element steps whose loads are issued together
template <typename T>
__global__ void __launch_bounds__(kTiledWarps * 32)
    lora_shrink_tiled(LoraShape sh, const T* __restrict__ x, const T* __restrict__ arena,
                      float* __restrict__ part, int* err) {
  __shared__ float red[kKSplit][kShrinkTile][kMaxRank + 1];
  pdl_launch_dependents();
  // The parts of a tile in consecutive blocks (its x rows read from the L2 after the first).
  const int64_t t0 = static_cast<int64_t>(blockIdx.x / sh.parts) * kShrinkTile;
  const int n = static_cast<int>(sh.t - t0 < kShrinkTile ? sh.t - t0 : kShrinkTile);
  const int p = static_cast<int>(blockIdx.x % sh.parts);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = warp % (kShrinkTile / 16), ks = warp / (kShrinkTile / 16);
  const int gi = lane / 4, ti = lane % 4;
  const int pr = sh.parts * sh.r, nt = sh.r / 8;
  // This lane's two token rows (of the tile); rows past the tile read its last token.
  const int ra = sub * 16 + gi, rb = ra + 8;
  const uint4* xa = reinterpret_cast<const uint4*>(x + (t0 + min(ra, n - 1)) * sh.k);
  const uint4* xb = reinterpret_cast<const uint4*>(x + (t0 + min(rb, n - 1)) * sh.k);
  const int pieces = static_cast<int>(sh.k / 8);
  TileSlots ts = load_tile_slots(sh.row_slots, t0, n, sh.slots, err, warp == 0 && p == 0);
  uint64_t mask = 0;
  int slot = next_slot(ts, mask);
  int r = slot >= 0 ? part_rank(sh.ranks, sh.entries, slot, sh.rank_index + p, sh.r, err) : 0;
  pdl_wait();
  while (slot >= 0) {
    if (r > 0) {  // block-uniform
      const T* a =
          arena + slot * sh.row_elems + sh.a_offset + static_cast<int64_t>(p) * sh.r * sh.k;
      float acc[kMaxRank / 8][4];
#pragma unroll
      for (int c = 0; c < kMaxRank / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[c][e] = 0.f;
      for (int q0 = ks * 4; q0 < pieces; q0 += 4 * kKSplit * kSteps) {
        uint4 va[kSteps], vb[kSteps];
#pragma unroll
        for (int u = 0; u < kSteps; ++u) {
          const int q = q0 + u * 4 * kKSplit + ti;
          const bool in = q < pieces;
          va[u] = in ? __ldg(xa + q) : make_uint4(0, 0, 0, 0);
          vb[u] = in ? __ldg(xb + q) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int c = 0; c < kMaxRank / 8; ++c) {
          if (c >= nt) break;
          const uint4* ar =
              reinterpret_cast<const uint4*>(a + static_cast<int64_t>(c * 8 + gi) * sh.k);
          uint4 w[kSteps];
#pragma unroll
          for (int u = 0; u < kSteps; ++u) {
            const int q = q0 + u * 4 * kKSplit + ti;
            w[u] = q < pieces ? __ldg(ar + q) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int u = 0; u < kSteps; ++u) {
            const uint32_t f0[4] = {va[u].x, vb[u].x, va[u].y, vb[u].y};
            const uint32_t f1[4] = {va[u].z, vb[u].z, va[u].w, vb[u].w};
            mma_16816<T>(acc[c], f0, w[u].x, w[u].y);
            mma_16816<T>(acc[c], f1, w[u].z, w[u].w);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kMaxRank / 8; ++c) {
        if (c >= nt) break;
        const int col = c * 8 + 2 * ti;
        red[ks][ra][col] = acc[c][0];
        red[ks][ra][col + 1] = acc[c][1];
        red[ks][rb][col] = acc[c][2];
        red[ks][rb][col + 1] = acc[c][3];
      }
      __syncthreads();
      for (int e = threadIdx.x; e < kShrinkTile * sh.r; e += blockDim.x) {
        const int row = e / sh.r, col = e % sh.r;
        if (!((mask >> row) & 1)) continue;
        float v = 0.f;
#pragma unroll
        for (int z = 0; z < kKSplit; ++z) v += red[z][row][col];
        part[(t0 + row) * pr + p * sh.r + col] = v;
      }
      __syncthreads();  // red is rewritten next
    }
    slot = next_slot(ts, mask);
    r = slot >= 0 ? part_rank(sh.ranks, sh.entries, slot, sh.rank_index + p, sh.r, err) : 0;
  }
}

// Columns per expand thread for a rank capacity of at most kRCap: B's rows of them in
// registers, 64 of R's entries in all.
template <int kRCap>
constexpr int kExpandColsPer = kRCap >= 64   ? 1
                               : kRCap >= 32 ? 2
                                             : 4;
// Tokens whose outputs an expand thread loads at once (16 outputs in registers).
template <int kRCap>
constexpr int kExpandBatch = 16 / kExpandColsPer<kRCap>;

// The expand on the CUDA cores (T <= kGroupedRows; every T for f32): block (group,
// column tile of kExpandThreads * kCols columns), a thread per kCols columns
// kExpandThreads apart (part p_i each): for each distinct slot u of the group, the
// slot's ranks and B_u[c, :R] of its columns in registers (the first slot's before the
// wait), then the group's shrunk rows (summed over the K pieces, zero past each part's
// rank) staged in shared memory while the first kExpandBatch outputs load, then for the
// group's tokens of slot u, kExpandBatch at a time, out[t, c] += sum_j B_u[c, j]
// s[t, p R + j], rounded once.
template <typename T, int kRCap>
__global__ void __launch_bounds__(kExpandThreads, 2)
    lora_expand(LoraShape sh, const T* __restrict__ arena, const float* __restrict__ part,
                T* __restrict__ out, int64_t ldo, int* err) {
  constexpr int kCols = kExpandColsPer<kRCap>, kE = kPiece<T>, kQ = (kRCap + kE - 1) / kE;
  constexpr int kBatchOut = kExpandBatch<kRCap>;
  extern __shared__ float4 sv[];  // [kTile, P R / 4], by the token's place in the range
  pdl_launch_dependents();
  const GroupRange gr = group_range(sh.t);
  const int64_t t0 = gr.t0;
  const int pr = sh.parts * sh.r, pr4 = pr / 4;
  int64_t c[kCols];
  int p[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    c[i] = static_cast<int64_t>(blockIdx.y) * kExpandThreads * kCols + i * kExpandThreads +
           threadIdx.x;
    p[i] = part_of(sh, c[i]);
  }
  TileSlots ts =
      load_tile_slots(sh.row_slots, t0, gr.n, sh.slots, err, threadIdx.x < 32 && blockIdx.y == 0);
  uint64_t mask = 0;
  int slot = gr.grouped ? nth_slot(ts, static_cast<int>(blockIdx.x), mask) : next_slot(ts, mask);
  bool waited = false;
  for (; slot >= 0; slot = gr.grouped ? -1 : next_slot(ts, mask)) {
    const PartRanks rk = slot_ranks(sh, slot, err);
    int r[kCols];
#pragma unroll
    for (int i = 0; i < kCols; ++i) r[i] = c[i] < sh.n ? rk.of(p[i]) : 0;
    // B's rows (columns past the rank meet zeros in sv).
    uint4 bv[kCols][kQ];
    const T* bs = arena + slot * sh.row_elems + sh.b_offset;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const uint4* b = reinterpret_cast<const uint4*>(bs + (c[i] < sh.n ? c[i] : 0) * sh.r);
#pragma unroll
      for (int q = 0; q < kQ; ++q)
        bv[i][q] = r[i] > 0 && q * kE < sh.r ? __ldg(b + q) : make_uint4(0, 0, 0, 0);
    }
    if (!waited) {
      pdl_wait();
      waited = true;
    }
    uint64_t rest = mask;
    int tk[kBatchOut];
    T ov[kBatchOut][kCols];
    auto load_batch = [&]() {
#pragma unroll
      for (int k = 0; k < kBatchOut; ++k) {
        tk[k] = rest != 0 ? pop_token(rest) : -1;
#pragma unroll
        for (int i = 0; i < kCols; ++i)
          if (tk[k] >= 0 && r[i] > 0) ov[k][i] = out[(t0 + tk[k]) * ldo + c[i]];
      }
    };
    load_batch();
    for (int e = threadIdx.x; e < gr.n * pr4; e += blockDim.x) {
      const int i = e / pr4, q = e % pr4;
      if (!((mask >> i) & 1)) continue;
      const float4* src = reinterpret_cast<const float4*>(part + (t0 + i) * pr) + q;
      float4 v = src[0];
      for (int z = 1; z < sh.kchunks; ++z) {
        const float4 w = src[z * sh.t * pr4];
        v.x += w.x;
        v.y += w.y;
        v.z += w.z;
        v.w += w.w;
      }
      // Entries past a part's rank were never written: zeros instead.
      const int j = 4 * q % sh.r, rq = rk.of(4 * q / sh.r);
      v.x = j < rq ? v.x : 0.f;
      v.y = j + 1 < rq ? v.y : 0.f;
      v.z = j + 2 < rq ? v.z : 0.f;
      v.w = j + 3 < rq ? v.w : 0.f;
      sv[e] = v;
    }
    __syncthreads();
    for (;;) {
#pragma unroll
      for (int k = 0; k < kBatchOut; ++k) {
        if (tk[k] < 0) break;
        const int64_t row = (t0 + tk[k]) * ldo;
#pragma unroll
        for (int i = 0; i < kCols; ++i) {
          if (r[i] == 0) continue;
          const float4* s = sv + tk[k] * pr4 + p[i] * sh.r / 4;
          float acc = 0.f;
#pragma unroll
          for (int q = 0; q < kQ; ++q) {
            if (q * kE < r[i]) {
#pragma unroll
              for (int h = 0; h < kE / 4; ++h) {
                const float4 sq = s[q * kE / 4 + h];
                const float sj[4] = {sq.x, sq.y, sq.z, sq.w};
#pragma unroll
                for (int e = 0; e < 4; ++e)
                  acc = fmaf(piece_elem<T>(bv[i][q], 4 * h + e), sj[e], acc);
              }
            }
          }
          out[row + c[i]] = from_f<T>(to_f(ov[k][i]) + acc);
        }
      }
      if (rest == 0) break;
      load_batch();
    }
    __syncthreads();  // sv is rewritten next
  }
  if (!waited) pdl_wait();  // the grid completes after the kernels before it
}

template <typename T, int kRCap>
void launch_expand(const LoraShape& sh, int64_t groups, const T* arena, const float* part,
                   void* out, int64_t ldo, int* err, cudaStream_t stream) {
  constexpr int kCols = kExpandColsPer<kRCap>;
  const size_t smem = sizeof(float) * kTile * sh.parts * sh.r;
  allow_dynamic_smem(reinterpret_cast<const void*>(lora_expand<T, kRCap>), smem);
  const dim3 grid(
      static_cast<unsigned>(groups),
      static_cast<unsigned>((sh.n + kExpandThreads * kCols - 1) / (kExpandThreads * kCols)));
  launch_kernel(lora_expand<T, kRCap>, grid, dim3(kExpandThreads), smem, stream, sh, arena, part,
                static_cast<T*>(out), ldo, err);
}

// Whether the shrink runs grouped (T <= kGroupedRows, and every T of f32, which has no
// tensor-core form here), with K in kChunk pieces.
bool grouped_shrink(int64_t t, DType type) {
  return t <= kGroupedRows || type == DType::kF32;
}

template <typename T>
void launch_typed(const LoraShape& sh, const void* x, const void* arena, float* part, void* out,
                  int64_t ldo, int* err, DType type, cudaStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  const T* at = static_cast<const T*>(arena);
  const int pr = sh.parts * sh.r;
  const int64_t groups =
      sh.t <= kGroupedRows ? std::min<int64_t>(sh.t, sh.slots) : (sh.t + kTile - 1) / kTile;
  if (grouped_shrink(sh.t, type)) {
    const dim3 grid(static_cast<unsigned>(groups), (pr + kShrinkWarps - 1) / kShrinkWarps,
                    static_cast<unsigned>(sh.kchunks));
    launch_kernel(lora_shrink_grouped<T>, grid, dim3(kShrinkWarps * 32), 0, stream, sh, xt, at,
                  part, err);
  } else if constexpr (!std::is_same_v<T, float>) {
    launch_kernel(lora_shrink_tiled<T>,
                  dim3(static_cast<unsigned>((sh.t + kShrinkTile - 1) / kShrinkTile * sh.parts)),
                  dim3(kTiledWarps * 32), 0, stream, sh, xt, at, part, err);
  }
  if (!grouped_shrink(sh.t, type)) {
    launch_expand_mma(sh, type, arena, part, out, ldo, err, stream);
  } else if (sh.r <= 8) {
    launch_expand<T, 8>(sh, groups, at, part, out, ldo, err, stream);
  } else if (sh.r <= 16) {
    launch_expand<T, 16>(sh, groups, at, part, out, ldo, err, stream);
  } else if (sh.r <= 32) {
    launch_expand<T, 32>(sh, groups, at, part, out, ldo, err, stream);
  } else {
    launch_expand<T, 64>(sh, groups, at, part, out, ldo, err, stream);
  }
}

int shrink_chunks(int64_t t, int64_t k, DType type) {
  return grouped_shrink(t, type) ? static_cast<int>((k + kChunk - 1) / kChunk) : 1;
}

}  // namespace
}  // namespace lora

int64_t lora_scratch_floats(int64_t t, int64_t k, int parts, int max_rank, DType type) {
  return lora::shrink_chunks(t, k, type) * t * parts * max_rank;
}

bool lora_supports(int64_t k, int max_rank, int64_t row_elems, int64_t a_offset, int64_t b_offset) {
  return k % 8 == 0 && max_rank % 8 == 0 && max_rank <= lora::kMaxRank && row_elems % 8 == 0 &&
         a_offset % 8 == 0 && b_offset % 8 == 0;
}

void launch_lora(const LoraLaunch& l, cudaStream_t stream) {
  lora::LoraShape sh;
  sh.row_slots = l.row_slots;
  sh.ranks = l.ranks;
  sh.entries = l.rank_entries;
  sh.rank_index = l.rank_index;
  sh.slots = l.slots;
  sh.row_elems = l.row_elems;
  sh.a_offset = l.a_offset;
  sh.b_offset = l.b_offset;
  sh.t = l.t;
  sh.n = l.n;
  sh.k = l.k;
  sh.r = l.max_rank;
  sh.parts = l.parts;
  for (int p = 0; p < lora::kMaxParts; ++p) sh.part_end[p] = l.part_end[p];
  sh.kchunks = lora::shrink_chunks(l.t, l.k, l.type);
  switch (l.type) {
    case DType::kBF16:
      lora::launch_typed<bf16_t>(sh, l.x, l.arena, l.scratch, l.out, l.ldo, l.err, l.type, stream);
      break;
    case DType::kF16:
      lora::launch_typed<f16_t>(sh, l.x, l.arena, l.scratch, l.out, l.ldo, l.err, l.type, stream);
      break;
    default:
      lora::launch_typed<float>(sh, l.x, l.arena, l.scratch, l.out, l.ldo, l.err, l.type, stream);
  }
}

}  // namespace tachyon::cuda
