// The prefill flash kernel on Hopper's warpgroup instructions (sm_90a; bf16/f16,
// head_dim 64 or 128). Same work split, arguments and results as attention_flash.cu's
// mma.sync kernel (which serves every other case and other devices). Warp-specialised:
//
// A block owns 128 rows, q_tile = 128 / group query tokens of one sequence times the
// `group` query heads that share a KV head, and is three warpgroups:
// - Two consumer warpgroups; warpgroup g owns rows [64g, 64g + 64) and keeps their Q
//   fragments in registers (each warp loads its own 16 rows).
// - A loader warpgroup owning a ring of kStages K/V buffers of 64 keys, laid out in
//   128-byte-swizzled panels (wgmma.cuh): warps 8-9 copy K, warps 10-11 V; loader p of
//   each half gathers key p of each tile from the paged cache (its block-table entry
//   read one tile ahead), a warp copies whole rows kPer keys at a time with cp.async,
//   and each thread's copies arrive on the stage's "K full" or "V full" mbarrier as they
//   land. A stage is refilled once all eight consumer warps released it ("empty").
// A block holds an SM alone (its registers), so its start and end are not hidden behind
// another block's work: the Q copy and the first tile's copies go out before the barrier
// set-up, and nothing on the way in or out divides by a runtime divisor (FlashTile).
// Per tile and consumer warpgroup:
//   S = Q Kᵀ: head_dim / 16 wgmma m64n64k16 (K from shared memory);
//   behind it, O += P V of the previous tile (m64n{head_dim}k16, P from registers in
//     the S accumulators' layout, V transposed from shared memory);
//   the online softmax of S (exp2 with the scale folded in, the mask only on tiles that
//     cross a row's causal or window edge) comes before the wait for P V in the source,
//     but ptxas hoists that wait to the top of the softmax's basic block (the SASS), so
//     the softmax overlaps only the other warpgroup's products; P V must finish before
//     O is rescaled, the new P written and the previous tile's stage released.
// The consumers never meet at a block barrier. They take turns at the tensor cores
// (named barriers 1 and 2): a warpgroup issues its S and its pending P V only after the
// other issued its own, so one's softmax runs while the other's products do. Both walk
// every tile, so the turns stay paired; a tile wholly masked for a warpgroup's rows
// passes its turn without products (after flushing its pending P V).
// Every visible tile issues both products, so ptxas sees one wgmma pipeline and does
// not serialize it (the first visible tile's P V adds a zero P times its own V).
// Two forms (measured 9% faster at 8 x 1024, 16% at 1 x 4096, together against the
// loaders' cp.async and a max rescaled at every tile): the copy engine loads whole tiles
// where it applies (the loaders' cp.async elsewhere: sliding windows, other block
// sizes), and the lazy softmax max. A diagnostic build
// records where each block's cycles go (flash_probe.cuh).
#include <cuda.h>  // CUtensorMap

#include <atomic>

#include "backend/cuda/attention_flash_tile.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/flash_probe.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/tensor_map.h"
#include "core/settings.h"
#include "backend/cuda/wgmma.cuh"

#if TACHYON_FLASH_PROBE
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#endif

namespace tachyon::cuda {
namespace {

constexpr int kRows = 128;          // rows (query, head) per block
constexpr int kKeys = 64;           // keys per K/V tile
std::atomic<bool> g_enabled{true};  // set_flash_wgmma
std::atomic<int64_t> g_tma_launches{0};

constexpr int kLoaders = 64;   // per half (K or V): one key of a tile per thread
constexpr int kThreads = 384;  // two consumer warpgroups, then the loaders
constexpr int kStages = 4;     // K/V ring: in use, the previous (its P V), two loading
// setmaxnreg: the loaders keep 72 registers (fewer spill their unrolled copies), the
// consumers take 216 (72 + 2 x 216 <= 504, the 384 x 168 the block is launched with).
constexpr int kLoaderRegs = 72, kConsumerRegs = 216;

template <int HD>
struct WgTraits {
  static constexpr int kChunks = HD / 8;
  static constexpr uint32_t kQBytes = kRows * HD * 2;                 // Q, then the O staging
  static constexpr uint32_t kTileBytes = kKeys * HD * 2;              // K (or V) of one tile
  static constexpr uint32_t kStageBytes = 2 * kTileBytes;             // K then V
  static constexpr uint32_t kBars = kQBytes + kStages * kStageBytes;  // 3 x kStages mbarriers
  static constexpr size_t kBytes = kBars + 3 * kStages * 8 + 1024;    // + alignment
  static_assert(HD % 64 == 0, "whole 128-byte panels");
  static_assert(32 % kChunks == 0 && kKeys == kLoaders, "whole rows per copy, a key a loader");
};

// The copy-engine form of the loads (kTma): where it applies (TmaKv::box_rows > 0), the
// caches as [num_blocks * kv_heads * block_size, head_dim] tensor maps in boxes of
// box_rows keys (one page run: min(block_size, 64)) x 64 columns.
struct TmaKv {
  int box_rows = 0;
  int rows = 0;  // the maps' row count: a box there is wholly past the cache (zeros)
};

// kTma: the copy-engine loads. The softmax max is the lazy one (FlashRows::step's
// kLazy: O is rescaled only on tiles where a row's max grows past the bound).
template <typename T, int HD, bool kTma>
__global__ void __launch_bounds__(kThreads, 1)
    attention_flash_wgmma_kernel(const AttentionArgs a, const int32_t* __restrict__ items,
                                 const int group, const int q_tile, const float scale_log2,
                                 const __grid_constant__ CUtensorMap map_k,
                                 const __grid_constant__ CUtensorMap map_v, const TmaKv tma,
                                 uint32_t* __restrict__ probe) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = WgTraits<HD>;
  // The diagnostic build's record of this block (flash_probe.cuh); compiled out otherwise.
  uint32_t* const rec =
      kFlashProbe && probe != nullptr ? probe + kProbeWords * blockIdx.x : nullptr;
  const uint32_t c_entry = kFlashProbe ? static_cast<uint32_t>(clock()) : 0;
  const uint64_t g_entry = probe_globaltimer();
  auto stamp = [&](int slot) {  // thread 0's cycles since entry
    if constexpr (kFlashProbe)
      if (rec != nullptr && threadIdx.x == 0) rec[slot] = static_cast<uint32_t>(clock()) - c_entry;
  };
  constexpr int kChunks = L::kChunks;
  constexpr int kKSteps = HD / 16;
  constexpr int kSRegs = kKeys / 2;
  constexpr int kORegs = HD / 2;
  constexpr int kS = kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Swizzling acts on address bits: align the base to 1024 bytes.
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  const uint32_t q_base = smem_u32(smem);
  const uint32_t kv_base = q_base + L::kQBytes;
  const uint32_t bars = q_base + L::kBars;
  auto full_k = [&](int s) { return bars + 8u * s; };
  auto full_v = [&](int s) { return bars + 8u * (kS + s); };
  auto empty = [&](int s) { return bars + 8u * (2 * kS + s); };

  pdl_wait();  // qkv and the caches come from the previous kernels
  FlashTile f;
  if (!flash_tile<kKeys>(a, items, group, q_tile, f)) return;
  const int n_tiles = f.n_tiles, k_begin = f.k_begin, window = a.sliding_window;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int w0 = warp * 16;
  if constexpr (kFlashProbe) {
    if (rec != nullptr && tid == 0) {
      rec[0] = static_cast<uint32_t>(g_entry);
      rec[1] = static_cast<uint32_t>(g_entry >> 32);
      rec[2] = probe_smid();
      rec[3] = static_cast<uint32_t>(n_tiles);
    }
    stamp(4);
  }
  // A loader's part (warps 8-11): half 0 copies K, half 1 V, loader p key p of each tile.
  const int half = (tid - 256) >> 6, p = (tid - 256) & 63, pw = p >> 5;
  auto copy_tile = [&](int t, int row) {  // tile t's copies of key p (row: its cache row)
    constexpr int kPer = 32 / kChunks;    // keys per warp-wide copy
    const int c = lane % kChunks, sub = lane / kChunks;
    const T* src = static_cast<const T*>(half == 0 ? a.k_cache : a.v_cache);
    const uint32_t dst0 = kv_base + (t % kS) * L::kStageBytes + half * L::kTileBytes;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int kr = i * kPer + sub;  // the key within the warp's 32
      const int r_row = __shfl_sync(0xffffffffu, row, kr);
      const int r = pw * 32 + kr;
      const int64_t off = r_row >= 0 ? int64_t{r_row} * HD + c * 8 : 0;
      cp_async16(dst0 + (c >> 3) * (kKeys * 128) + swz128(r, (c & 7) * 8), src + off, r_row >= 0);
    }
  };
  // Tiles the copy engine loads (kTma): every tile wholly inside the keys but the first
  // (issued before the barriers exist). The others are copied by the loaders with
  // cp.async, zero past the keys: a page's rows past the sequence are never read (they
  // may hold anything, and 0 x NaN in P V is NaN).
  auto tma_tile = [&](int t) { return kTma && t > 0 && k_begin + (t + 1) * kKeys <= f.k_end; };
  // The loads a block starts with go out before anything else, their latency (most of
  // the block's start) overlapping the barrier set-up and the register hand-over: the
  // consumers' Q and the loaders' first tile (arriving on its barriers once they exist).
  int blk = 0;     // a loader's next block-table entry
  if (warp < 8) {  // the warp's own 16 Q rows (zero past the tile)
    const T* qkv = static_cast<const T*>(a.qkv);
#pragma unroll
    for (int i = lane; i < 16 * kChunks; i += 32) {
      const int r = w0 + i / kChunks, c = i % kChunks;
      const bool live = f.row_live(r);
      const T* src = live ? qkv + f.row_offset(r, a.qkv_cols, HD) + c * 8 : qkv;
      cp_async16(q_base + (c >> 3) * (kRows * 128) + swz128(r, (c & 7) * 8), src, live);
    }
    cp_async_commit();
  } else {
    blk = flash_key_block(a, f, k_begin + p);
    copy_tile(0, flash_key_row(a, f, k_begin + p, blk));
    if (n_tiles > 1) blk = flash_key_block(a, f, k_begin + kKeys + p);
  }
  if (tid == 0) {
    for (int s = 0; s < kS; ++s) {
      mbar_init(full_k(s), kLoaders);
      mbar_init(full_v(s), kLoaders);
      mbar_init(empty(s), 8);  // the consumer warps
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp >= 8) {  // the loaders
    regs_dec<kLoaderRegs>();
    const bool run_start = kTma && p % tma.box_rows == 0;  // the first key of a page run
    ProbeLaps<2> laps;  // 0: waiting for an empty stage, 1: the rest
    laps.begin();
    cp_async_arrive(half == 0 ? full_k(0) : full_v(0));
    for (int t = 1; t < n_tiles; ++t) {
      const int s = t % kS;
      const int row = flash_key_row(a, f, k_begin + t * kKeys + p, blk);
      if (t + 1 < n_tiles) blk = flash_key_block(a, f, k_begin + (t + 1) * kKeys + p);
      laps.lap(1);
      if (t >= kS) mbar_wait(empty(s), ((t / kS) - 1) & 1);
      laps.lap(0);
      const uint32_t bar = half == 0 ? full_k(s) : full_v(s);
      if (tma_tile(t)) {
        if (run_start) {  // the run's boxes, one a panel
          mbar_arrive_tx(bar, tma.box_rows * HD * 2);
          const uint32_t dst = kv_base + s * L::kStageBytes + half * L::kTileBytes + p * 128;
          const int y = row >= 0 ? row : tma.rows;  // a bad block-table entry: zeros
          const void* map = half == 0 ? static_cast<const void*>(&map_k) : &map_v;
#pragma unroll
          for (int panel = 0; panel < HD / 64; ++panel)
            tma_load_2d(dst + panel * (kKeys * 128), map, panel * 64, y, bar);
        } else {
          mbar_arrive(bar);
        }
      } else {
        copy_tile(t, row);
        cp_async_arrive(bar);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    laps.lap(1);
    if (p == 0) laps.store(rec != nullptr ? rec + kProbeLoader + 2 * half : nullptr);
    return;
  }

  regs_inc<kConsumerRegs>();
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler
  const int g0 = wg * 64;
  const int qa = f.query_of(w0 + (lane >> 2));
  const int qb = f.query_of(w0 + (lane >> 2) + 8);
  const int gq_lo = f.query_of(g0), gq_hi = f.query_of(g0 + 63);
  const bool group_live = f.row_live(g0);
  const bool warp_live = f.row_live(w0);

  // The warp's Q fragments, once its copy landed.
  cp_async_wait<0>();
  __syncwarp();
  uint32_t qf[kKSteps][4];
  {
    const int r = w0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const int col = kk * 16 + (lane >> 4) * 8;
      ldsm_x4(q_base + (col >> 6) * (kRows * 128) + swz128(r, col & 63), qf[kk]);
    }
  }
  stamp(5);

  float o[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
  float sc[kSRegs];
  uint32_t pf[kKeys / 16][4] = {};
  bool pending = false;
  FlashRows rows;

  auto wait_v = [&](int u) { mbar_wait(full_v(u % kS), (u / kS) & 1); };
  auto release = [&](int u) {
    if (lane == 0) mbar_arrive(empty(u % kS));
  };
  auto issue_pv = [&](int u) {
    const uint32_t vs = kv_base + (u % kS) * L::kStageBytes + L::kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      wgmma_rs<HD, T, 1>(o, pf[kk], wgmma_desc(vs + kk * 16 * 128, kKeys * 128, 1024), 1);
  };
  auto flush_pv = [&](int u) {  // the pending P V of tile u, alone, to completion
    wait_v(u);
    fence_proxy_async();
    wgmma_fence();
    issue_pv(u);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) fence_regs(pf[kk]);
  };
  // The turns: warpgroup 0 goes first; warpgroup 1 does not pass on its last turn (every
  // arrival then has its wait).
  const int my_turn = 1 + wg, other_turn = 2 - wg;
  if (wg == 1) named_arrive(1, 256);
  auto pass_turn = [&](int t) {
    if (wg == 0 || t + 1 < n_tiles) named_arrive(other_turn, 256);
  };

  ProbeLaps<kPhCount> laps;  // lane 0 of each warpgroup's first warp (flash_probe.cuh)
  laps.begin();
  for (int t = 0; t < n_tiles; ++t) {
    const int s = t % kS;
    mbar_wait(full_k(s), (t / kS) & 1);
    laps.lap(kPhWaitK);
    if (t == 0) stamp(6);
    const int kt = k_begin + t * kKeys;
    const bool visible =
        group_live && kt <= gq_hi && (window <= 0 || kt + kKeys - 1 > gq_lo - window);
    if (visible) {
      const int pv_tile = pending ? t - 1 : t;  // with no P pending, P = 0 times this V
      wait_v(pv_tile);
      // cp.async writes shared memory through the generic proxy, wgmma reads it through
      // the async one; the copy engine's writes need no fence.
      if (!tma_tile(t) || !tma_tile(pv_tile)) fence_proxy_async();
      laps.lap(kPhWaitV);
      named_barrier(my_turn, 256);
      laps.lap(kPhTurn);
      const uint32_t ks = kv_base + s * L::kStageBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        const uint32_t panel = kk >> 2, k32 = (kk & 3) * 32;
        wgmma_rs<kKeys, T, 0>(sc, qf[kk], wgmma_desc(ks + panel * (kKeys * 128) + k32, 16, 1024),
                              kk > 0);
      }
      wgmma_commit();
      issue_pv(pv_tile);
      wgmma_commit();
      pass_turn(t);
      wgmma_wait<1>();
      fence_regs(sc);
      laps.lap(kPhSReady);
      if constexpr (kFlashProbe) {  // where ptxas puts this wait anyway (flash_probe.cuh)
        wgmma_wait<0>();
        laps.lap(kPhPvDone);
      }

      const bool edge = kt + kKeys - 1 > gq_lo || (window > 0 && kt <= gq_hi - window);
      const float2 alpha =
          rows.step<kKeys / 8, true>([&](int n, int e) -> float& { return sc[4 * n + e]; }, edge,
                                     kt, qa, qb, window, scale_log2, lane);
      wgmma_wait<0>();
      fence_regs(o);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) fence_regs(pf[kk]);
      laps.lap(kPhSoftmax);
      if (pending) release(t - 1);
      if (!rows.kept) {
#pragma unroll
        for (int i = 0; i < kORegs; i += 4) {
          o[i] *= alpha.x;
          o[i + 1] *= alpha.x;
          o[i + 2] *= alpha.y;
          o[i + 3] *= alpha.y;
        }
      }
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        pf[kk][0] = pack2<T>(sc[8 * kk], sc[8 * kk + 1]);
        pf[kk][1] = pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
        pf[kk][2] = pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
        pf[kk][3] = pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
      }
      pending = true;
      laps.lap(kPhRest);
    } else {
      named_barrier(my_turn, 256);
      pass_turn(t);
      if (pending) {  // flush the last P V (its stage is released behind it)
        flush_pv(t - 1);
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) pf[kk][0] = pf[kk][1] = pf[kk][2] = pf[kk][3] = 0;
        release(t - 1);
        pending = false;
      }
      wait_v(t);  // unread here, but its copies must land before the stage is refilled
      release(t);
      laps.lap(kPhRest);
    }
  }
  if (pending) flush_pv(n_tiles - 1);
  stamp(7);
  if ((warp & 3) == 0 && lane == 0)
    laps.store(rec != nullptr ? rec + kProbeConsumer + kPhCount * wg : nullptr);
  pdl_launch_dependents();
  if (!warp_live) return;

  const float2 inv = rows.inverse_sums();
  {
    const int ra = w0 + (lane >> 2), rb = ra + 8;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      const int col = d * 8 + (lane & 3) * 2;
      const uint32_t pa = (col >> 6) * (kRows * 128) + swz128(ra, col & 63);
      const uint32_t pb = (col >> 6) * (kRows * 128) + swz128(rb, col & 63);
      *reinterpret_cast<uint32_t*>(smem + pa) = pack2<T>(o[4 * d] * inv.x, o[4 * d + 1] * inv.x);
      *reinterpret_cast<uint32_t*>(smem + pb) =
          pack2<T>(o[4 * d + 2] * inv.y, o[4 * d + 3] * inv.y);
    }
  }
  __syncwarp();
  T* out = static_cast<T*>(a.out);
  const int64_t out_cols = int64_t{a.heads} * HD;
#pragma unroll
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = w0 + i / kChunks, c = i % kChunks;
    if (f.row_live(r))
      *reinterpret_cast<uint4*>(out + f.row_offset(r, out_cols, HD) + c * 8) =
          *reinterpret_cast<const uint4*>(smem + (c >> 3) * (kRows * 128) + swz128(r, (c & 7) * 8));
  }
  if constexpr (kFlashProbe) {
    stamp(8);
    if (rec != nullptr && tid == 0) {
      const uint64_t g = probe_globaltimer();
      rec[9] = static_cast<uint32_t>(g);
      rec[10] = static_cast<uint32_t>(g >> 32);
    }
  }
#else
  __trap();
#endif
}

#if TACHYON_FLASH_PROBE
// The diagnostic build's records (flash_probe.cuh): one buffer, reused by every launch;
// a launch first writes the previous launch's records to PREFIX.<its blocks>.
struct ProbeState {
  std::string prefix = setting_env_str("flash-probe");
  uint32_t* buf = nullptr;
  int64_t cap = 0, last = 0;
  cudaStream_t last_stream = nullptr;

  void flush() {
    if (last == 0) return;
    std::vector<uint32_t> h(static_cast<size_t>(kProbeWords * last));
    if (cudaStreamSynchronize(last_stream) == cudaSuccess &&
        cudaMemcpy(h.data(), buf, h.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess) {
      const std::string name = std::string(prefix) + "." + std::to_string(last);
      if (FILE* fp = std::fopen(name.c_str(), "wb")) {
        std::fwrite(h.data(), 4, h.size(), fp);
        std::fclose(fp);
      }
    }
    last = 0;
  }
};

ProbeState& probe_state() {
  static ProbeState* st = [] {
    auto* p = new ProbeState;
    std::atexit([] { probe_state().flush(); });
    return p;
  }();
  return *st;
}

}  // namespace

uint32_t* flash_probe_buffer(int64_t blocks, cudaStream_t stream) {
  ProbeState& st = probe_state();
  if (st.prefix.empty() || blocks <= 0) return nullptr;
  cudaStreamCaptureStatus cs;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
    return nullptr;
  st.flush();
  if (blocks > st.cap) {
    if (st.buf != nullptr) cudaFree(st.buf);
    st.buf = nullptr;
    st.cap = 0;
    if (cudaMalloc(&st.buf, static_cast<size_t>(4 * kProbeWords * blocks)) != cudaSuccess)
      return nullptr;
    st.cap = blocks;
  }
  if (cudaMemsetAsync(st.buf, 0, static_cast<size_t>(4 * kProbeWords * blocks), stream) !=
      cudaSuccess)
    return nullptr;
  st.last = blocks;
  st.last_stream = stream;
  return st.buf;
}

namespace {
#endif

// Whether the kernel's sm_90a image is what this device runs.
template <typename T, int HD>
bool wgmma_image() {
  static const bool ok =
      runs_sm90a_image(reinterpret_cast<const void*>(attention_flash_wgmma_kernel<T, HD, false>));
  return ok;
}

// The copy-engine loads' maps of the caches, where they apply: no sliding window (tiles
// then start at key 0, so every page run of a tile starts a box), a block size that is a
// multiple of 8 and divides 64 or is a multiple of 64, and row counts a coordinate holds.
template <int HD>
bool tma_maps(const AttentionArgs& a, CUtensorMap& map_k, CUtensorMap& map_v, TmaKv& tma) {
  if (a.sliding_window > 0) return false;
  const int bs = a.block_size;
  if (bs <= 0 || bs % 8 != 0 || (64 % bs != 0 && bs % 64 != 0)) return false;
  const int64_t rows = int64_t{a.num_blocks} * a.kv_heads * bs;
  if (rows <= 0 || rows >= (int64_t{1} << 31) - 64) return false;
  if (reinterpret_cast<uintptr_t>(a.k_cache) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.v_cache) % 16 != 0)
    return false;
  tma.box_rows = bs < 64 ? bs : 64;
  tma.rows = static_cast<int>(rows);
  return encode_map(map_k, a.k_cache, a.type, rows, HD, HD, tma.box_rows) &&
         encode_map(map_v, a.v_cache, a.type, rows, HD, HD, tma.box_rows);
}

template <typename T, int HD>
bool launch_hd(const AttentionArgs& a, const int32_t* items, int32_t num_items,
               cudaStream_t stream) {
  using L = WgTraits<HD>;
  if (L::kBytes > static_cast<size_t>(max_dynamic_smem())) return false;
  CUtensorMap map_k{}, map_v{};
  TmaKv tma;
  const bool use_tma = tma_maps<HD>(a, map_k, map_v, tma);
  if (use_tma) g_tma_launches.fetch_add(1, std::memory_order_relaxed);
  auto kernel = use_tma ? attention_flash_wgmma_kernel<T, HD, true>
                        : attention_flash_wgmma_kernel<T, HD, false>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), L::kBytes);
  const int group = a.heads / a.kv_heads;
  const int64_t blocks = items != nullptr ? int64_t{num_items} * a.kv_heads
                                          : (int64_t{a.max_query_len} + kRows / group - 1) /
                                                (kRows / group) * a.num_seqs * a.kv_heads;
  if (blocks > 0)
    launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), L::kBytes, stream, a,
                  items, group, kRows / group, a.scale * kLog2e, map_k, map_v, tma,
                  flash_probe_buffer(blocks, stream));
  return true;
}

template <typename T>
bool launch_typed(const AttentionArgs& a, const int32_t* items, int32_t num_items,
                  cudaStream_t stream) {
  switch (a.head_dim) {
    case 64:
      return launch_hd<T, 64>(a, items, num_items, stream);
    case 128:
      return launch_hd<T, 128>(a, items, num_items, stream);
    default:
      return false;
  }
}

}  // namespace

void set_flash_wgmma(bool on) {
  g_enabled.store(on, std::memory_order_relaxed);
}

int64_t flash_tma_launches() {
  return g_tma_launches.load(std::memory_order_relaxed);
}

bool attention_flash_wgmma_active(DType type, int head_dim) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  const bool bf = type == DType::kBF16;
  if (!bf && type != DType::kF16) return false;
  switch (head_dim) {
    case 64:
      return bf ? wgmma_image<bf16_t, 64>() : wgmma_image<f16_t, 64>();
    case 128:
      return bf ? wgmma_image<bf16_t, 128>() : wgmma_image<f16_t, 128>();
    default:
      return false;
  }
}

bool launch_attention_flash_wgmma(const AttentionArgs& a, const int32_t* items, int32_t num_items,
                                  cudaStream_t stream) {
  if (!attention_flash_wgmma_active(a.type, a.head_dim)) return false;
  if (a.type == DType::kBF16) return launch_typed<bf16_t>(a, items, num_items, stream);
  return launch_typed<f16_t>(a, items, num_items, stream);
}

}  // namespace tachyon::cuda
