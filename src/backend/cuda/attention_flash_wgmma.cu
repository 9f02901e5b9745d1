// The prefill flash kernel on Hopper's warpgroup instructions (sm_90a; bf16/f16,
// head_dim 64 or 128). Same work split, arguments and results as attention_flash.cu's
// mma.sync kernel (which serves every other case and other devices):
//
// A block (two warpgroups, 256 threads) owns 128 rows, q_tile = 128 / group query
// tokens of one sequence times the `group` query heads that share a KV head;
// warpgroup g owns rows [64g, 64g + 64) and keeps their Q fragments in registers. K/V
// tiles of 64 keys are gathered from the paged cache with cp.async into a ring of
// kStages shared-memory buffers laid out in 128-byte-swizzled panels (wgmma.cuh), two
// tiles ahead of their use. Per tile and warpgroup:
//   S = Q Kᵀ: head_dim / 16 wgmma m64n64k16 (K from shared memory);
//   behind it, O += P V of the previous tile (m64n{head_dim}k16, P from registers in
//     the S accumulators' layout, V transposed from shared memory);
//   the online softmax of S (exp2 with the scale folded in, the mask only on tiles that
//     cross a row's causal or window edge) runs while P V does; P V must finish before
//     O is rescaled and the new P written.
// Every visible tile issues both products, so ptxas sees one wgmma pipeline and does
// not serialize it (the first visible tile's P V adds a zero P times its own V). Tiles
// wholly masked for a warpgroup's rows are skipped by it, after flushing its pending
// P V. The ring holds the tile in use, the previous one (its V still read) and two
// loading; the block barrier of each tile frees the buffer of tile t - 2.
#include <atomic>

#include "backend/cuda/attention_flash_tile.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/wgmma.cuh"

namespace tachyon::cuda {
namespace {

constexpr int kRows = 128;  // rows (query, head) per block
constexpr int kThreads = 256;
constexpr int kKeys = 64;  // keys per K/V tile
// The K/V ring: the tile in use, the previous one (its P V still in flight) and kAhead
// tiles loading.
constexpr int kStages = 4;
[[maybe_unused]] constexpr int kAhead = kStages - 2;  // (used only by the sm_90a pass)
std::atomic<bool> g_enabled{true};                    // set_flash_wgmma

template <int HD>
struct WgTraits {
  static constexpr int kChunks = HD / 8;                                 // 16-byte pieces per row
  static constexpr uint32_t kQBytes = kRows * HD * 2;                    // Q, then the O staging
  static constexpr uint32_t kTileBytes = kKeys * HD * 2;                 // K (or V) of one tile
  static constexpr uint32_t kStageBytes = 2 * kTileBytes;                // K then V
  static constexpr uint32_t kKeyRows = kQBytes + kStages * kStageBytes;  // int [kStages][kKeys]
  static constexpr size_t kBytes = kKeyRows + kStages * kKeys * sizeof(int) + 1024;  // + alignment
  static_assert(HD % 64 == 0, "whole 128-byte panels");
  static_assert(kKeys * kChunks % kThreads == 0 && kKeys <= kThreads, "whole load rounds");
};

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads, 1)
    attention_flash_wgmma_kernel(const AttentionArgs a, const int32_t* __restrict__ items,
                                 const int group, const int q_tile, const float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = WgTraits<HD>;
  constexpr int kChunks = L::kChunks;
  constexpr int kKSteps = HD / 16;  // k-steps of Q Kᵀ
  constexpr int kSRegs = kKeys / 2;
  constexpr int kORegs = HD / 2;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Swizzling acts on address bits: align the base to 1024 bytes.
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  const uint32_t q_base = smem_u32(smem);
  const uint32_t kv_base = q_base + L::kQBytes;
  int* key_rows = reinterpret_cast<int*>(smem + L::kKeyRows);  // [kStages][kKeys]

  pdl_wait();  // qkv and the caches come from the previous kernels
  FlashTile f;
  if (!flash_tile<kKeys>(a, items, group, q_tile, f)) return;
  const int n_tiles = f.n_tiles, k_begin = f.k_begin, window = a.sliding_window;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler
  const int g0 = wg * 64;                                 // the warpgroup's first row
  const int w0 = warp * 16;                               // the warp's first row
  const int qa = f.query_of(w0 + (lane >> 2));            // this lane's rows: g and g + 8
  const int qb = f.query_of(w0 + (lane >> 2) + 8);
  const int gq_lo = f.query_of(g0), gq_hi = f.query_of(g0 + 63);
  const bool group_live = f.row_live(g0);
  const bool warp_live = f.row_live(w0);

  // Q rows (zero for rows past the tile), swizzled panels of [kRows][64].
  const T* qkv = static_cast<const T*>(a.qkv);
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i - r * kChunks;
    const bool live = f.row_live(r);
    const T* src = live ? qkv + f.row_offset(r, a.qkv_cols, HD) + c * 8 : qkv;
    cp_async16(q_base + (c >> 3) * (kRows * 128) + swz128(r, (c & 7) * 8), src, live);
  }
  cp_async_commit();

  // key_rows[u % kStages][k]: the cache row of key k of tile u (flash_key_row).
  const bool row_thread = tid < kKeys;
  // This thread's key of tile u (past the keys from tile n_tiles on).
  auto key_of = [&](int u) { return k_begin + u * kKeys + tid; };
  auto fetch_block = [&](int u) { return flash_key_block(a, f, key_of(u)); };
  auto put_key_row = [&](int u, int blk) {
    key_rows[(u % kStages) * kKeys + tid] = flash_key_row(a, f, key_of(u), blk);
  };
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  auto issue_tile = [&](int u) {  // needs key_rows of tile u visible to every thread
    const uint32_t ks = kv_base + (u % kStages) * L::kStageBytes;
    const uint32_t vs = ks + L::kTileBytes;
    const int* rows = key_rows + (u % kStages) * kKeys;
#pragma unroll
    for (int p = 0; p < kKeys * kChunks / kThreads; ++p) {
      const int i = tid + p * kThreads;
      const int r = i / kChunks, c = i - r * kChunks;
      const int row = rows[r];
      const int64_t off = row >= 0 ? int64_t{row} * HD + c * 8 : 0;
      const uint32_t dst = (c >> 3) * (kKeys * 128) + swz128(r, (c & 7) * 8);
      cp_async16(ks + dst, kc + off, row >= 0);
      cp_async16(vs + dst, vc + off, row >= 0);
    }
  };

  // Prologue: tiles 0 .. kAhead - 1 in flight, the key rows of tile kAhead ready.
  for (int u = 0; u < kAhead; ++u)
    if (row_thread && u < n_tiles) put_key_row(u, fetch_block(u));
  __syncthreads();
  for (int u = 0; u < kAhead; ++u) {
    if (u < n_tiles) issue_tile(u);
    cp_async_commit();
  }
  if (row_thread && kAhead < n_tiles) put_key_row(kAhead, fetch_block(kAhead));

  // Q fragments (A of Q Kᵀ) for the warp's 16 rows: ldmatrix rows w0 + (l & 7) +
  // 8 ((l >> 3) & 1), columns 16 kk + 8 (l >> 4).
  uint32_t qf[kKSteps][4];
  cp_async_wait<kAhead>();  // Q
  __syncthreads();
  {
    const int r = w0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const int col = kk * 16 + (lane >> 4) * 8;
      ldsm_x4(q_base + (col >> 6) * (kRows * 128) + swz128(r, col & 63), qf[kk]);
    }
  }

  float o[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
  float sc[kSRegs];
  uint32_t pf[kKeys / 16][4] = {};  // P of the pending tile, the A fragments of P V
  bool pending = false;             // P V of tile t - 1 not issued yet
  FlashRows rows;

  auto issue_pv = [&](int u) {  // O += P V of tile u
    const uint32_t vs = kv_base + (u % kStages) * L::kStageBytes + L::kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      wgmma_rs<HD, T, 1>(o, pf[kk], wgmma_desc(vs + kk * 16 * 128, kKeys * 128, 1024), 1);
  };

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kAhead - 1>();  // tile t (this thread's part)
    fence_proxy_async();
    __syncthreads();  // everyone's; tile t - 2's buffer is free (its P V finished in t - 1)
    if (t + kAhead < n_tiles) issue_tile(t + kAhead);
    cp_async_commit();
    const int next = t + kAhead + 1;  // key rows one tile ahead of their copy
    const int next_blk = row_thread ? fetch_block(next) : 0;

    const int kt = k_begin + t * kKeys;
    const bool visible =
        group_live && kt <= gq_hi && (window <= 0 || kt + kKeys - 1 > gq_lo - window);
    if (visible) {
      const uint32_t ks = kv_base + (t % kStages) * L::kStageBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        const uint32_t panel = kk >> 2, k32 = (kk & 3) * 32;
        wgmma_rs<kKeys, T, 0>(sc, qf[kk], wgmma_desc(ks + panel * (kKeys * 128) + k32, 16, 1024),
                              kk > 0);
      }
      wgmma_commit();
      // With no P pending, P is zero and V is this tile's: O += 0 keeps one path.
      issue_pv(pending ? t - 1 : t);
      wgmma_commit();
      wgmma_wait<1>();
      fence_regs(sc);

      // Only tiles crossing a row's edge (diagonal, window start, the context's end).
      const bool edge = kt + kKeys - 1 > gq_lo || (window > 0 && kt <= gq_hi - window);
      const float2 alpha =
          rows.step<kKeys / 8>([&](int n, int e) -> float& { return sc[4 * n + e]; }, edge, kt, qa,
                               qb, window, scale_log2, lane);
      wgmma_wait<0>();  // the previous P V is done: O and P may change
      fence_regs(o);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) fence_regs(pf[kk]);
#pragma unroll
      for (int i = 0; i < kORegs; i += 4) {
        o[i] *= alpha.x;
        o[i + 1] *= alpha.x;
        o[i + 2] *= alpha.y;
        o[i + 3] *= alpha.y;
      }
      // The S accumulators of key tiles 2kk and 2kk + 1 are the A fragment of keys
      // [16 kk, 16 kk + 16).
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        pf[kk][0] = pack2<T>(sc[8 * kk], sc[8 * kk + 1]);
        pf[kk][1] = pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
        pf[kk][2] = pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
        pf[kk][3] = pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
      }
      pending = true;
    } else if (pending) {  // flush before the tile's buffer can be reused
      wgmma_fence();
      issue_pv(t - 1);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) fence_regs(pf[kk]);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) pf[kk][0] = pf[kk][1] = pf[kk][2] = pf[kk][3] = 0;
      pending = false;
    }
    // Published by the next iteration's barrier; its slot was last read by the issue of
    // tile next - kStages, iterations ago.
    if (row_thread && next < n_tiles) put_key_row(next, next_blk);
  }
  if (pending) {
    wgmma_fence();
    issue_pv(n_tiles - 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) fence_regs(pf[kk]);
  }
  pdl_launch_dependents();
  cp_async_wait<0>();
  if (!warp_live) return;  // no barrier below: each warp finishes its own rows

  const float2 inv = rows.inverse_sums();
  // O through the warp's own rows of the Q buffer (only this warp read them, into its
  // Q fragments; same swizzled panels), then out in
  // 16-byte pieces: whole rows per lane group, coalesced.
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
#else
  __trap();  // launched only where the sm_90a image runs (wgmma_image)
#endif
}

// Whether the kernel's sm_90a image is what this device runs.
template <typename T, int HD>
bool wgmma_image() {
  static const bool ok =
      runs_sm90a_image(reinterpret_cast<const void*>(attention_flash_wgmma_kernel<T, HD>));
  return ok;
}

template <typename T, int HD>
bool launch_hd(const AttentionArgs& a, const int32_t* items, int32_t num_items,
               cudaStream_t stream) {
  using L = WgTraits<HD>;
  if (L::kBytes > static_cast<size_t>(max_dynamic_smem())) return false;
  auto kernel = attention_flash_wgmma_kernel<T, HD>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), L::kBytes);
  const int group = a.heads / a.kv_heads;
  const int64_t blocks = items != nullptr ? int64_t{num_items} * a.kv_heads
                                          : (int64_t{a.max_query_len} + kRows / group - 1) /
                                                (kRows / group) * a.num_seqs * a.kv_heads;
  if (blocks > 0)
    launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), L::kBytes, stream, a,
                  items, group, kRows / group, a.scale * kLog2e);
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
