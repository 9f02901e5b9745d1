// Dense products on Hopper's wgmma with TMA loads (sm_90a image on an sm_90 device):
// y[m, n] = x[m, k] · w[n, k]ᵀ in bf16 or f16 with f32 accumulation, and the gated form
// y[m, i] = act(x · w[i]ᵀ) * (x · w[up + i]ᵀ) that computes an MLP's gate and up
// products in one pass and writes only the activation (the [T, 2I] intermediate and the
// separate gated-activation pass disappear).
//
// Schedule (persistent, warp-specialised):
// - A block is three warpgroups: a producer and two consumers. It owns output tiles of
//   128 x 256 accumulators (gated: 128 gate columns beside the same 128 up columns,
//   128 x 128 outputs) and walks them from blockIdx.x in steps of the grid, in groups of
//   row tiles so that the tiles in flight at once share rows of x and of w in the L2.
// - The producer's one thread streams k-slices of 64 through a ring of shared-memory
//   stages (four; three with the hand-off below) with TMA (x: 128 x 64, w: two boxes
//   of 128 x 64, 128-byte swizzle, zero fill past every edge), each stage's arrival
//   counted in bytes on its "full" mbarrier; it refills a stage once both consumers
//   released it ("empty").
// - Each consumer computes 64 rows x 256 columns with wgmma m64n256k16 (both operands
//   from shared memory), keeps one k-slice's products in flight while waiting for the
//   next, and releases a stage once the products reading it completed. The epilogue
//   (enum Epi) either runs in the consumers (the product straight from registers; the
//   gated tile staged through shared memory and written with one TMA store), with the
//   tensor cores idle meanwhile, or is handed off: the consumers round their tile into
//   a hand-off buffer and start the next tile while warps 1-3 of the producer
//   warpgroup write it out (the backend's choice from 2048 rows, where it is faster):
//   the product, the gated activation, the product added to y (a residual stream), or
//   the fused qkv rows rotated and their k and v heads written into the paged KV cache
//   (the separate rotary pass disappears).
// - Optionally (the hand-off forms): row scales (kRms), each row of the product scaled
//   by a factor given per row before it is rounded (an RMS norm's 1 / rms(x_row),
//   computed by a pass that only reads x, with the norm's weight folded into w: the
//   normalised rows are never written).
// Registers: the producer gives back all but 40 (setmaxnreg), the consumers take 232;
// with the add or the rotary in the hand-off the producer warpgroup keeps 152 (its
// epilogue warps hold a batch of loads) and the consumers take 176 (they compile to
// 168). Each split stays within the 384 x 168 the block is launched with
// (P + 2 C <= 504), from which the consumers' raise is drawn.
#include <cuda.h>  // CUtensorMap

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma.cuh"

namespace tachyon::cuda {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;
// Row tiles a group (GemmTiles): the tiles in flight at once share rows of x and of w.
constexpr int kGroup = 16;
static_assert(kBK == 64, "encode_map's boxes are 64 columns (128 bytes) wide");
constexpr int kThreads = 384;
constexpr uint32_t kABytes = kBM * kBK * 2;  // 16 KiB
constexpr uint32_t kBBytes = kBN * kBK * 2;  // 32 KiB
constexpr uint32_t kStageBytes = kABytes + kBBytes;
// The gated epilogue's staging tile per consumer: 64 rows x 128 outputs, two panels of 64.
constexpr uint32_t kOutBytes = 64 * (kBN / 2) * 2;

// A consumer's accumulator tile handed to the epilogue warps: 64 x 256 in the storage
// dtype, four panels of 64 columns.
constexpr uint32_t kHandBytes = 64 * kBN * 2;

// What the epilogue writes and who computes it. The consumers themselves: the product
// (kPlain, straight from registers) or the gated activation (SiLU inlined, or any KAct
// through apply_act; staged for a TMA store). Or the epilogue warps (kHand*): the
// consumers round their accumulators into a hand-off tile and go on with the next tile
// while warps 1-3 of the producer warpgroup write the product or the gated activation
// from it, or the product added to y (kHandAdd: a residual stream), or the product
// rotated and written into the KV cache as well (kHandRotary: the qkv rows); a ring of
// three stages then leaves room for the two hand-off tiles.
enum class Epi { kPlain, kGatedSilu, kGatedAct, kHandPlain, kHandGated, kHandAdd, kHandRotary };

constexpr bool handed(Epi e) {
  return e == Epi::kHandPlain || e == Epi::kHandGated || e == Epi::kHandAdd ||
         e == Epi::kHandRotary;
}
constexpr bool gated_epi(Epi e) {
  return e == Epi::kGatedSilu || e == Epi::kGatedAct || e == Epi::kHandGated;
}
constexpr int stages(Epi e) {
  return handed(e) ? 3 : 4;
}
// The consumers' staging (gated) or hand-off tiles.
constexpr uint32_t out_bytes(Epi e) {
  return handed(e) ? 2 * kHandBytes : (e == Epi::kPlain ? 0 : 2 * kOutBytes);
}
constexpr size_t smem_bytes(Epi e) {
  return stages(e) * kStageBytes + out_bytes(e) + 2 * stages(e) * 8 + 4 * 8 + 1024;  // + alignment
}
std::atomic<int64_t> g_launches{0}, g_rms_launches{0};

// Two adjacent outputs (4-byte aligned), rounded to nearest.
template <typename T>
__device__ __forceinline__ void store2(T* p, float a, float b) {
  if constexpr (std::is_same_v<T, bf16_t>)
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
  else
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint4 ld_shared16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}
#endif

// A block's tiles: first, first + step, ... below num_tiles. (Walked through next():
// with a plain for loop over them ptxas spills in the hand-off's gated form.)
struct TileWalk {
  int t_next, step, end;
  __device__ __forceinline__ TileWalk(int first, int step_, int num_tiles)
      : t_next(first), step(step_), end(num_tiles) {}
  __device__ __forceinline__ bool next(int& t) {
    if (t_next < end) {
      t = t_next;
      t_next += step;
      return true;
    }
    return false;
  }
};

struct GemmTiles {
  int m, tiles_m, tiles_n, group;  // group: kGroup
  // The tile of sequence number t: row tile and column tile.
  __device__ __forceinline__ void at(int t, int& mt, int& nt) const {
    const int per_group = group * tiles_n;
    const int g = t / per_group, first = g * group;
    const int rows = min(group, tiles_m - first), local = t - g * per_group;
    mt = first + local % rows;
    nt = local / rows;
  }
};

// The gated output of one gate and up accumulator pair: both rounded to the storage
// dtype, the activation rounded, then the product (as the separate gated pass does).
template <typename T, Epi kEpi>
__device__ __forceinline__ float gated(float g, float u, KAct act) {
  g = round_to<T>(g);
  u = round_to<T>(u);
  const float a = kEpi == Epi::kGatedSilu ? __fdividef(g, 1.f + __expf(-g)) : apply_act(g, act);
  return round_to<T>(a) * u;
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16_t>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(a, b);
    memcpy(&r, &v, 4);
  }
  return r;
}

// The two 16-bit values of a word (the lower one first) as floats.
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t w) {
  if constexpr (std::is_same_v<T, bf16_t>)
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  else
    return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu))),
                       __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))));
}

// The activation, SiLU through the fast exponential and reciprocal (as the consumers'
// gated epilogue computes it), any other through apply_act.
__device__ __forceinline__ float act_fast(float g, KAct act) {
  return act == KAct::kSilu ? __fdividef(g, 1.f + __expf(-g)) : apply_act(g, act);
}

// Two gated outputs from words of gate and up values: the activation rounded, then the
// product.
template <typename T>
__device__ __forceinline__ uint32_t gated_pair(uint32_t g, uint32_t u, KAct act) {
  const float2 gf = unpack2<T>(g), uf = unpack2<T>(u);
  return pack2<T>(round_to<T>(act_fast(gf.x, act)) * uf.x, round_to<T>(act_fast(gf.y, act)) * uf.y);
}

// The sum of the squares of a piece's eight 16-bit values.
template <typename T>
__device__ __forceinline__ float piece_squares(const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = unpack2<T>(w[i]);
    s = fmaf(f.x, f.x, s);
    s = fmaf(f.y, f.y, s);
  }
  return s;
}

// Two sums of 16-bit values, each rounded.
template <typename T>
__device__ __forceinline__ uint32_t add_pair(uint32_t a, uint32_t b) {
  const float2 af = unpack2<T>(a), bf = unpack2<T>(b);
  return pack2<T>(af.x + bf.x, af.y + bf.y);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The byte offset of 16-byte piece p (columns 8p .. 8p + 7) of row r in a hand-off tile:
// four 128-byte-swizzled panels of 64 columns.
__device__ __forceinline__ uint32_t hand_piece(int r, int p) {
  return (p >> 3) * (64 * 128) + r * 128 + (((p & 7) ^ (r & 7)) << 4);
}

// The epilogue warps walk a hand-off tile's 16-byte pieces a batch of items at a time,
// issuing every global load of a batch (the residual; the rotary tables and the slots)
// before using any: one at a time, their latency under the product's load holds up the
// consumers (Llama-3-8B's qkv at 8192 rows with the rotary: 676 µs one at a time, 640
// batched, on different boards; the plain product 587). The rotary's items each serve
// every head of the tile, which halves the table loads and the batches at head_dim 128:
// 632 and 575 µs against 674 and 670 before, the plain product 603 and 610 (one H100).
constexpr int kAddBatch = 8, kRotaryBatch = 4;

// The epilogue warps' kHandRotary pass over one hand-off tile (rows row0.., columns
// col0..): what rotary_write_kv_vec_kernel does to the same rounded values. The tile
// holds whole heads (kBN % head_dim == 0), rotated alike, so an item is a row and a place
// within a head, taken in every head of the tile: its table loads (the row's cosines and
// sines at that place) serve them all. In the half style an item of the first rotary half
// takes its partner piece of the second half along, so the places of the second half
// have no item of their own.
template <typename T>
__device__ __forceinline__ void rotary_tile(uint32_t h, int64_t row0, int col0, int m, int n_out,
                                            T* __restrict__ y, int64_t ldy, const WgmmaRotaryKv& rk,
                                            int e) {
  const int hd = rk.head_dim, rot = rk.rot, half = rot / 2;
  const int rotated_heads = rk.heads + rk.kv_heads;
  const bool interleaved = rk.style == KRotary::kInterleaved;
  const int head0 = col0 / hd;
  const int tile_heads = min(kBN, n_out - col0) / hd;  // (n_out is whole heads)
  // A head's places that start an item: the rotated pieces (half style: the first half's)
  // and the unrotated tail's.
  const int lead = (interleaved ? rot : half) / 8;
  const int per_row = lead + (hd - rot) / 8, items = 64 * per_row;
  const bool any_rotated = head0 < rotated_heads;         // q or k heads in the tile
  const bool any_cached = head0 + tile_heads > rk.heads;  // k or v heads in the tile
  for (int i0 = e; i0 < items; i0 += 96 * kRotaryBatch) {
    // An item's place and its loads: 0..3 cosines then sines (half style: 8 of each; the
    // interleaved style uses the first of each).
    bool live[kRotaryBatch];
    int e0[kRotaryBatch];
    int32_t slot[kRotaryBatch];
    float4 cs[kRotaryBatch][4];
#pragma unroll
    for (int u = 0; u < kRotaryBatch; ++u) {
      const int item = i0 + 96 * u, r = item / per_row, q = item % per_row;
      const int64_t row = row0 + r;
      e0[u] = q < lead ? 8 * q : rot + 8 * (q - lead);
      live[u] = item < items && row < m;
      slot[u] = live[u] && any_cached ? rk.slots[row] : -1;
      if (live[u] && any_rotated && e0[u] < rot) {
        const float* t = rk.cos_sin + row * rot;
        const int f = interleaved ? e0[u] / 2 : e0[u];  // first frequency
        cs[u][0] = *reinterpret_cast<const float4*>(t + f);
        cs[u][2] = *reinterpret_cast<const float4*>(t + half + f);
        if (!interleaved) {
          cs[u][1] = *reinterpret_cast<const float4*>(t + f + 4);
          cs[u][3] = *reinterpret_cast<const float4*>(t + half + f + 4);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kRotaryBatch; ++u) {
      if (!live[u]) continue;
      const int r = (i0 + 96 * u) / per_row;
      const int64_t row = row0 + r;
      const bool in_rot = e0[u] < rot;
      // The partner piece travels with this one (rotated with it, or copied: v heads).
      const bool pair = in_rot && !interleaved;
      const bool bad_slot = slot[u] >= rk.num_blocks * rk.block_size;
      if (bad_slot && e0[u] == 0) report(rk.err, kErrKvSlot);
      for (int j = 0; j < tile_heads; ++j) {
        const int head = head0 + j, p = (j * hd + e0[u]) / 8;
        T* out = y + row * ldy + col0 + j * hd + e0[u];
        uint4 a = ld_shared16(h + hand_piece(r, p)), b{};
        if (pair) b = ld_shared16(h + hand_piece(r, p + half / 8));
        if (in_rot && head < rotated_heads) {
          T* ae = reinterpret_cast<T*>(&a);
          if (interleaved) {
            const float cv[4] = {cs[u][0].x, cs[u][0].y, cs[u][0].z, cs[u][0].w};
            const float sv[4] = {cs[u][2].x, cs[u][2].y, cs[u][2].z, cs[u][2].w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              float y0, y1;
              rotate(to_f(ae[2 * i]), to_f(ae[2 * i + 1]), cv[i], sv[i], y0, y1);
              ae[2 * i] = from_f<T>(y0);
              ae[2 * i + 1] = from_f<T>(y1);
            }
          } else {
            T* be = reinterpret_cast<T*>(&b);
            const float cv[8] = {cs[u][0].x, cs[u][0].y, cs[u][0].z, cs[u][0].w,
                                 cs[u][1].x, cs[u][1].y, cs[u][1].z, cs[u][1].w};
            const float sv[8] = {cs[u][2].x, cs[u][2].y, cs[u][2].z, cs[u][2].w,
                                 cs[u][3].x, cs[u][3].y, cs[u][3].z, cs[u][3].w};
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              float y0, y1;
              rotate(to_f(ae[i]), to_f(be[i]), cv[i], sv[i], y0, y1);
              ae[i] = from_f<T>(y0);
              be[i] = from_f<T>(y1);
            }
          }
        }
        *reinterpret_cast<uint4*>(out) = a;
        if (pair) *reinterpret_cast<uint4*>(out + half) = b;
        if (head < rk.heads || slot[u] < 0 || bad_slot) continue;  // q, not cached, or past it
        const bool is_k = head < rotated_heads;
        const int kvh = is_k ? head - rk.heads : head - rotated_heads;
        const int bs = rk.block_size;
        const int64_t at =
            ((slot[u] / bs * int64_t{rk.kv_heads} + kvh) * bs + slot[u] % bs) * hd + e0[u];
        void* cache = is_k ? rk.k_cache : rk.v_cache;
        if (rk.kv_fp8) {
          kv_fp8_t* dst = static_cast<kv_fp8_t*>(cache) + at;
          *reinterpret_cast<uint2*>(dst) = pack_e4m3x8<T>(a);
          if (pair) *reinterpret_cast<uint2*>(dst + half) = pack_e4m3x8<T>(b);
        } else {
          T* dst = static_cast<T*>(cache) + at;
          *reinterpret_cast<uint4*>(dst) = a;
          if (pair) *reinterpret_cast<uint4*>(dst + half) = b;
        }
      }
    }
  }
}
#endif

// kRms (the hand-off forms): the consumers load their rows' factors from
// row_scale as a tile starts and scale the accumulators' rows by them before rounding
// them into the hand-off tile. kHandAdd with row_squares: the epilogue warps also write
// each row's sum of squares of its new values over the tile's columns.
template <typename T, Epi kEpi, bool kRms = false>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_wgmma_kernel(const __grid_constant__ CUtensorMap map_x,
                      const __grid_constant__ CUtensorMap map_w,
                      const __grid_constant__ CUtensorMap map_y, T* __restrict__ y,
                      const int64_t ldy, const int n_out, const int k, const int up_row,
                      const GemmTiles tiles, const KAct act, const WgmmaRotaryKv rk,
                      const float* __restrict__ row_scale, float* __restrict__ row_squares) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!kRms || handed(kEpi), "row scales: the hand-off");
  constexpr bool kGated = gated_epi(kEpi), kHand = handed(kEpi);
  constexpr int kStages = stages(kEpi);
  // The epilogue warps of the add and the rotary hold a batch of loads.
  constexpr bool kLoads = kEpi == Epi::kHandAdd || kEpi == Epi::kHandRotary;
  constexpr int kProducerRegs = kLoads ? 152 : 40;
  constexpr int kConsumerRegs = kLoads ? 176 : 232;
  static_assert(kProducerRegs + 2 * kConsumerRegs <= 3 * 168);
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t out0 = base + kStages * kStageBytes;  // staging or hand-off tiles
  const uint32_t full0 = out0 + out_bytes(kEpi), empty0 = full0 + kStages * 8;
  const uint32_t hfull0 = empty0 + kStages * 8, hempty0 = hfull0 + 16;  // per consumer
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (threadIdx.x == 0) {
    tma_prefetch_map(&map_x);
    tma_prefetch_map(&map_w);
    if constexpr (kGated && !kHand) tma_prefetch_map(&map_y);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, 8);  // each consumer warp
    }
    for (int c = 0; c < 2; ++c) {
      mbar_init(hfull0 + 8 * c, 128);  // every thread of the consumer
      mbar_init(hempty0 + 8 * c, 96);  // every epilogue thread
    }
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // x was written by the kernel before, y may still be read by it

  const int num_tiles = tiles.tiles_m * tiles.tiles_n;
  const int step = gridDim.x;
  const int first = blockIdx.x;
  const int kb_count = (k + kBK - 1) / kBK;

  if (wg == 0) {
    regs_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      TileWalk walk(first, step, num_tiles);
      int t;
      while (walk.next(t)) {
        int mt, nt;
        tiles.at(t, mt, nt);
        const int row = mt * kBM;
        const int b_row0 = kGated ? nt * (kBN / 2) : nt * kBN;  // w rows of the two boxes
        const int b_row1 = kGated ? up_row + nt * (kBN / 2) : nt * kBN + kBN / 2;
        for (int kb = 0; kb < kb_count; ++kb) {
          const uint32_t full = full0 + 8 * stage, sa = base + stage * kStageBytes;
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          mbar_arrive_tx(full, kStageBytes);
          tma_load_2d(sa, &map_x, kb * kBK, row, full);
          tma_load_2d(sa + kABytes, &map_w, kb * kBK, b_row0, full);
          tma_load_2d(sa + kABytes + kBBytes / 2, &map_w, kb * kBK, b_row1, full);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    } else if (kHand && threadIdx.x >= 32) {
      // The epilogue warps: each consumer's hand-off tile, 16-byte pieces (8 outputs) to
      // global memory, rows and pieces spread over the 96 threads.
      const int e = threadIdx.x - 32;
      uint32_t hphase = 0;
      TileWalk walk(first, step, num_tiles);
      int t;
      while (walk.next(t)) {
        int mt, nt;
        tiles.at(t, mt, nt);
        for (int c = 0; c < 2; ++c) {
          mbar_wait(hfull0 + 8 * c, hphase);
          const uint32_t h = out0 + c * kHandBytes;
          const int64_t row0 = int64_t{mt} * kBM + c * 64;
          if constexpr (kEpi == Epi::kHandRotary) {
            rotary_tile<T>(h, row0, nt * kBN, tiles.m, n_out, y, ldy, rk, e);
          } else {
            constexpr int kPieces = kGated ? kBN / 16 : kBN / 8;  // per row
            constexpr int kItems = 64 * kPieces;
            // (only the add loads from global memory)
            constexpr int kBatch = kEpi == Epi::kHandAdd ? kAddBatch : 1;
            const int col0 = nt * (kGated ? kBN / 2 : kBN);
            for (int i0 = e; i0 < kItems; i0 += 96 * kBatch) {
              uint4 res[kBatch];  // kHandAdd: y's pieces, all loaded before any is used
              if constexpr (kEpi == Epi::kHandAdd) {
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                  const int item = i0 + 96 * u, r = item / kPieces, p = item % kPieces;
                  const int col = col0 + p * 8;
                  if (item < kItems && row0 + r < tiles.m && col < n_out)
                    res[u] = *reinterpret_cast<const uint4*>(y + (row0 + r) * ldy + col);
                }
              }
#pragma unroll
              for (int u = 0; u < kBatch; ++u) {
                const int item = i0 + 96 * u, r = item / kPieces, p = item % kPieces;
                const int64_t row = row0 + r;
                if (item >= kItems || row >= tiles.m) break;  // rows rise with item
                const uint32_t off = hand_piece(r, p);
                uint4 v = ld_shared16(h + off);
                const int col = col0 + p * 8;
                if constexpr (kGated) {
                  const uint4 g = ld_shared16(h + 2 * (64 * 128) + off);  // up: panels 2, 3
                  v = make_uint4(gated_pair<T>(v.x, g.x, act), gated_pair<T>(v.y, g.y, act),
                                 gated_pair<T>(v.z, g.z, act), gated_pair<T>(v.w, g.w, act));
                }
                T* dst = y + row * ldy + col;
                [[maybe_unused]] float sq = 0.f;  // the add: the piece's squares
                if (col + 8 <= n_out) {
                  if constexpr (kEpi == Epi::kHandAdd) {
                    const uint4 o = res[u];
                    v = make_uint4(add_pair<T>(v.x, o.x), add_pair<T>(v.y, o.y),
                                   add_pair<T>(v.z, o.z), add_pair<T>(v.w, o.w));
                    if (row_squares != nullptr) sq = piece_squares<T>(v);
                  }
                  *reinterpret_cast<uint4*>(dst) = v;
                } else if constexpr (kEpi != Epi::kHandAdd) {  // (the add takes whole pieces)
                  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
                  uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
                  for (int i = 0; i < 8 && col + i < n_out; ++i)
                    d16[i] = static_cast<uint16_t>(words[i >> 1] >> (16 * (i & 1)));
                }
                if constexpr (kEpi == Epi::kHandAdd) {
                  // The row's squares over the tile's columns: a warp's lanes hold one
                  // row's 32 pieces (item % 32 is the lane, item / 32 the same for the
                  // whole warp, so the break above is the warp's as well).
                  static_assert(kPieces == 32 && 96 % kPieces == 0, "a warp a row");
                  if (row_squares != nullptr) {
                    sq = warp_sum(sq);
                    if ((e & 31) == 0) row_squares[int64_t{nt} * tiles.m + row] = sq;
                  }
                }
              }
            }
          }
          mbar_arrive(hempty0 + 8 * c);
        }
        hphase ^= 1;
      }
    }
  } else {
    regs_inc<kConsumerRegs>();
    const int c = wg - 1;  // rows 64c .. 64c + 63 of the tile
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    int stage = 0;
    uint32_t phase = 0, hphase = 0;
    float acc[128];
    TileWalk walk(first, step, num_tiles);
    int t;
    while (walk.next(t)) {
      int mt, nt;
      tiles.at(t, mt, nt);
      // Accumulator 4j + e is row 16 warp + lane / 4 (+ 8 for e >= 2), column 8j +
      // 2 (lane % 4) + (e & 1) of the warp's 16 x 256.
      const int tile_row = mt * kBM + c * 64;
      // kRms: the factors of rows 16 warp + lane / 4 and 8 below it, loaded while the
      // slices compute (rows past the last: nothing to scale).
      [[maybe_unused]] float s0 = 0.f, s1 = 0.f;
      if constexpr (kRms) {
        const int r0 = tile_row + warp * 16 + (lane >> 2);
        if (r0 < tiles.m) s0 = row_scale[r0];
        if (r0 + 8 < tiles.m) s1 = row_scale[r0 + 8];
      }
      for (int kb = 0; kb < kb_count; ++kb) {
        const uint32_t sa = base + stage * kStageBytes;
        mbar_wait(full0 + 8 * stage, phase);
        const uint64_t da = wgmma_desc(sa + c * (64 * 128), 16, 1024);
        const uint64_t db = wgmma_desc(sa + kABytes, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk)
          wgmma_ss256<T>(acc, da + 2 * kk, db + 2 * kk, kb > 0 || kk > 0);  // +32 bytes of k
        wgmma_commit();
        // The slice before is complete once at most this one is in flight: release it.
        wgmma_wait<1>();
        fence_regs(acc);
        const int prev = stage == 0 ? kStages - 1 : stage - 1;
        if (kb > 0 && lane == 0) mbar_arrive(empty0 + 8 * prev);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
      fence_regs(acc);
      {
        const int last = stage == 0 ? kStages - 1 : stage - 1;
        if (lane == 0) mbar_arrive(empty0 + 8 * last);
      }
      if constexpr (kRms) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          acc[4 * j] *= s0;
          acc[4 * j + 1] *= s0;
          acc[4 * j + 2] *= s1;
          acc[4 * j + 3] *= s1;
        }
      }
      if constexpr (kHand) {
        // The whole 64 x 256 rounded to the hand-off tile once the epilogue warps are done
        // with the last one (stmatrix, as below).
        const uint32_t h = out0 + c * kHandBytes;
        mbar_wait(hempty0 + 8 * c, hphase ^ 1);
        hphase ^= 1;
        const int mat = lane >> 3;
        const int srow = warp * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
        for (int j = 0; j < kBN / 8; j += 2) {
          uint32_t r[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int jj = j + (q >> 1), e = 2 * (q & 1);
            r[q] = pack2<T>(acc[4 * jj + e], acc[4 * jj + e + 1]);
          }
          const int col = 8 * (j + (mat >> 1));
          stmatrix_x4(h + (col >> 6) * (64 * 128) + swz128(srow, col & 63), r);
        }
        mbar_arrive(hfull0 + 8 * c);
      } else if constexpr (kGated) {
        // Gate columns j < 16 beside up columns j + 16: the 64 x 128 outputs to this
        // consumer's staging tile (two 128-byte-swizzled panels of 64 columns), then one
        // TMA store (clipped at the edges) that runs on while the next tile computes.
        const uint32_t out = out0 + c * kOutBytes;
        if (threadIdx.x % 128 == 0) bulk_wait_all<true>();  // the last store read it
        named_barrier(1 + c, 128);
        const int mat = lane >> 3;  // stmatrix: this lane's row address is in matrix mat
        const int srow = warp * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
        for (int j = 0; j < kBN / 16; j += 2) {
          uint32_t r[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {  // (j, rows 0-7), (j, 8-15), (j + 1, 0-7), (j + 1, 8-15)
            const int jj = j + (q >> 1), e = 2 * (q & 1), u = jj + kBN / 16;
            r[q] = pack2<T>(gated<T, kEpi>(acc[4 * jj + e], acc[4 * u + e], act),
                            gated<T, kEpi>(acc[4 * jj + e + 1], acc[4 * u + e + 1], act));
          }
          const int col = 8 * (j + (mat >> 1));
          stmatrix_x4(out + (col >> 6) * (64 * 128) + swz128(srow, col & 63), r);
        }
        fence_proxy_async();
        named_barrier(1 + c, 128);
        if (threadIdx.x % 128 == 0) {
          tma_store_2d(&map_y, out, nt * (kBN / 2), tile_row);
          tma_store_2d(&map_y, out + 64 * 128, nt * (kBN / 2) + 64, tile_row);
          bulk_commit();
        }
      } else {
        const int64_t row0 = tile_row + warp * 16 + (lane >> 2);
        const int col0 = 2 * (lane & 3);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t r = row0 + 8 * half;
          if (r >= tiles.m) continue;
          T* o = y + r * ldy;
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const int col = nt * kBN + 8 * j + col0;
            if (col >= n_out) continue;
            store2(o + col, acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
          }
        }
      }
    }
    if (kGated && !kHand && threadIdx.x % 128 == 0) bulk_wait_all<false>();
  }
#else
  __trap();  // launched only where the sm_90a image runs (gemm_image)
#endif
}

// Whether the kernel's sm_90a image is what this device runs.
template <typename T, Epi kEpi, bool kRms = false>
bool gemm_image() {
  static const bool ok =
      runs_sm90a_image(reinterpret_cast<const void*>(gemm_wgmma_kernel<T, kEpi, kRms>));
  return ok;
}

template <typename T, Epi kEpi, bool kRms = false>
bool launch_typed(const WgmmaGemmArgs& a, cudaStream_t stream) {
  constexpr bool kGated = gated_epi(kEpi);
  constexpr size_t kSmem = smem_bytes(kEpi);
  if (!gemm_image<T, kEpi, kRms>()) return false;
  if (kSmem > static_cast<size_t>(max_dynamic_smem())) return false;
  CUtensorMap mx, mw, my;
  if (!encode_map(mx, a.x, a.type, a.m, a.k, a.k, kBM) ||
      !encode_map(mw, a.w, a.type, a.w_rows, a.k, a.k, kBN / 2))
    return false;
  if (kGated && !handed(kEpi)) {
    if (!encode_map(my, a.y, a.type, a.m, a.n_out, a.ldy, 64)) return false;
  } else {
    my = mx;  // unused
  }
  auto kernel = gemm_wgmma_kernel<T, kEpi, kRms>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem);
  // Blocks of one SM each: as many as the device holds at once.
  int resident = resident_blocks(reinterpret_cast<const void*>(kernel), kThreads, kSmem);
  if (a.max_blocks > 0) resident = std::min(resident, a.max_blocks);
  if (resident <= 0) return false;
  GemmTiles tiles;
  tiles.m = static_cast<int>(a.m);
  tiles.tiles_m = static_cast<int>(ceil_div(a.m, int64_t{kBM}));
  tiles.tiles_n = static_cast<int>(ceil_div(a.n_out, int64_t{kGated ? kBN / 2 : kBN}));
  tiles.group = kGroup;
  const int64_t num_tiles = int64_t{tiles.tiles_m} * tiles.tiles_n;
  const int blocks = static_cast<int>(std::min<int64_t>(num_tiles, resident));
  launch_kernel(kernel, dim3(blocks), dim3(kThreads), kSmem, stream, mx, mw, my,
                static_cast<T*>(a.y), a.ldy, static_cast<int>(a.n_out), static_cast<int>(a.k),
                static_cast<int>(a.up_row), tiles, a.act,
                a.rotary != nullptr ? *a.rotary : WgmmaRotaryKv{}, a.row_scale, a.row_squares);
  return true;
}

// The hand-off forms.
template <typename T>
bool launch_handed(const WgmmaGemmArgs& a, cudaStream_t stream) {
  if (a.row_scale != nullptr)
    return a.rotary != nullptr ? launch_typed<T, Epi::kHandRotary, true>(a, stream)
                               : launch_typed<T, Epi::kHandGated, true>(a, stream);
  if (a.add) return launch_typed<T, Epi::kHandAdd>(a, stream);
  if (a.rotary != nullptr) return launch_typed<T, Epi::kHandRotary>(a, stream);
  return a.up_row < 0 ? launch_typed<T, Epi::kHandPlain>(a, stream)
                      : launch_typed<T, Epi::kHandGated>(a, stream);
}

template <typename T>
bool launch_for_type(const WgmmaGemmArgs& a, cudaStream_t stream) {
  if (a.handoff) return launch_handed<T>(a, stream);
  if (a.row_scale != nullptr || a.add || a.rotary != nullptr)
    return false;  // with the hand-off only (gemm_wgmma_supports)
  if (a.up_row < 0) return launch_typed<T, Epi::kPlain>(a, stream);
  if (a.act == KAct::kSilu) return launch_typed<T, Epi::kGatedSilu>(a, stream);
  return launch_typed<T, Epi::kGatedAct>(a, stream);
}

}  // namespace

bool gemm_wgmma_active(DType type) {
  if (type == DType::kBF16)
    return gemm_image<bf16_t, Epi::kGatedSilu>() && tensor_map_encoder_available();
  if (type == DType::kF16)
    return gemm_image<f16_t, Epi::kGatedSilu>() && tensor_map_encoder_available();
  return false;
}

namespace {

// The kHandRotary epilogue's layout: heads of whole pieces that tile the 256-column
// accumulator tiles, rotary halves of whole pieces, 16-byte aligned tables and caches
// (8-byte for e4m3), slots within the int range of the cache.
bool rotary_supported(const WgmmaRotaryKv& r, const WgmmaGemmArgs& a) {
  const auto aligned = [](const void* p, uintptr_t b) {
    return reinterpret_cast<uintptr_t>(p) % b == 0;
  };
  const int hd = r.head_dim;
  const uintptr_t cache_align = r.kv_fp8 ? 8 : 16;
  return (r.style == KRotary::kHalf || r.style == KRotary::kInterleaved) && hd >= 8 &&
         hd % 8 == 0 && kBN % hd == 0 && r.rot > 0 && r.rot % 16 == 0 && r.rot <= hd &&
         r.heads > 0 && r.kv_heads > 0 && a.n_out == int64_t{r.heads + 2 * r.kv_heads} * hd &&
         r.cos_sin != nullptr && aligned(r.cos_sin, 16) && r.slots != nullptr &&
         r.k_cache != nullptr && r.v_cache != nullptr && aligned(r.k_cache, cache_align) &&
         aligned(r.v_cache, cache_align) && r.block_size > 0 && r.num_blocks > 0 &&
         r.num_blocks * r.block_size < (int64_t{1} << 31);
}

}  // namespace

bool gemm_wgmma_supports(const WgmmaGemmArgs& a) {
  const auto aligned = [](const void* p, uintptr_t b) {
    return reinterpret_cast<uintptr_t>(p) % b == 0;
  };
  constexpr int64_t kMax = int64_t{1} << 30;
  const bool gated = a.up_row >= 0;
  // The consumers' own plain epilogue stores pairs: even widths and strides.
  const bool pairs = !gated && !a.handoff;
  return (a.type == DType::kBF16 || a.type == DType::kF16) && a.m > 0 && a.m < kMax &&
         a.n_out > 0 && a.k > 0 && a.k % 8 == 0 && a.k < kMax && a.ldy >= a.n_out &&
         (!pairs || (a.n_out % 2 == 0 && a.ldy % 2 == 0)) && a.w_rows > 0 && a.w_rows < kMax &&
         (gated ? a.up_row >= a.n_out && a.up_row + a.n_out <= a.w_rows : a.n_out <= a.w_rows) &&
         // the TMA store of the gated tile (whole 16-byte rows: it writes past an
         // output that ends mid-piece), and the epilogue warps' 16-byte stores
         (gated || a.handoff ? a.ldy % 8 == 0 && aligned(a.y, 16) : true) &&
         (gated && !a.handoff ? a.n_out % 8 == 0 : true) && aligned(a.x, 16) && aligned(a.w, 16) &&
         aligned(a.y, 4) &&
         (a.add || a.rotary != nullptr
              ? !gated && a.handoff && a.n_out % 8 == 0 && !(a.add && a.rotary)
              : true) &&
         (a.rotary == nullptr || rotary_supported(*a.rotary, a)) &&
         // row scales: the hand-off's gated or rotary form
         (a.row_scale == nullptr ||
          (aligned(a.row_scale, 4) && a.handoff && !a.add && (gated || a.rotary != nullptr))) &&
         // the rows' squares: the add
         (a.row_squares == nullptr || (aligned(a.row_squares, 4) && a.add)) && a.max_blocks >= 0;
}

int gemm_wgmma_square_parts(int64_t n_out) {
  return static_cast<int>(ceil_div(std::max<int64_t>(n_out, 0), int64_t{kBN}));
}

bool launch_gemm_wgmma(const WgmmaGemmArgs& a, cudaStream_t stream) {
  if (!gemm_wgmma_active(a.type) || !gemm_wgmma_supports(a)) return false;
  const bool launched = a.type == DType::kBF16 ? launch_for_type<bf16_t>(a, stream)
                                               : launch_for_type<f16_t>(a, stream);
  if (launched) g_launches.fetch_add(1, std::memory_order_relaxed);
  if (launched && a.row_scale != nullptr) g_rms_launches.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

int64_t gemm_wgmma_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

int64_t gemm_wgmma_rms_launches() {
  return g_rms_launches.load(std::memory_order_relaxed);
}

}  // namespace tachyon::cuda
