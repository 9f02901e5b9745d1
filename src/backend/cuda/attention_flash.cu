// FlashAttention-2 prefill attention over the paged KV cache (bf16/f16; head_dim 64,
// 80, 96, 128 or 256; causal, optional sliding window).
//
// A block (8 warps) owns 128 rows: a tile of q_tile = 128 / group query tokens of one
// sequence times the `group` query heads that share one KV head, so the group reads
// each K/V tile once. Warp w owns rows [16w, 16w + 16). Per tile of 64 keys:
//   the K and V rows are gathered from the paged cache with cp.async into a ring of
//     kStages shared-memory buffers (rows padded by 16 bytes, so the eight 16-byte
//     rows an ldmatrix phase reads fall in distinct banks), kStages - 1 tiles ahead;
//   S = Q Kᵀ with mma.sync m16n8k16 into f32 registers (Q fragments kept in registers
//     for head_dim <= 128, re-read from shared memory with ldmatrix for 256; K through
//     ldmatrix);
//   online softmax on the registers (exp2 with the scale pre-multiplied by log2 e; the
//     mask only on tiles that cross a row's causal or window edge);
//   P, rounded to the storage dtype, is the A operand of P V straight from the S
//     registers (the m16n8 accumulator layout of two adjacent key tiles is the m16k16
//     A layout), V through ldmatrix.trans.
// Tiles wholly masked for a warp's rows (above the diagonal, before the window) are
// skipped by that warp. The cache row of each key is looked up once per tile, one tile
// ahead of its copy, so the block-table read never stalls the pipeline.
//
// The blocks' work items (attention_flash_tile.cuh, shared with the wgmma form of this
// kernel, attention_flash_wgmma.cu, which launch_attention_flash prefers on Hopper) come
// from a host-built list sorted by keys, most first (causal load balance, and no block
// for a sequence's missing tiles: a step of 200 decode rows and one 8k-token chunk
// would otherwise launch hundreds of thousands of empty blocks), or without host
// lengths from a dense grid whose blocks past a sequence's tiles exit.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "backend/cuda/attention_flash_tile.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/mma_util.cuh"

namespace tachyon::cuda {
namespace {

constexpr int kRows = 128;  // rows (query, head) per block
constexpr int kWarps = 8;   // 16 rows each
constexpr int kThreads = 32 * kWarps;
constexpr int kKeys = 64;  // keys per K/V tile

template <int HD>
struct FlashTraits {
  // head_dim 256 keeps Q in shared memory: its 64 fragment registers next to the 128
  // of O would spill.
  static constexpr bool kQInRegs = HD <= 128;
  static constexpr int kStages = HD <= 128 ? 3 : 2;
  static constexpr int kMinBlocks = HD <= 64 ? 2 : 1;
  static constexpr int kLd = HD + 8;      // shared row stride in elements (16-byte pad)
  static constexpr int kChunks = HD / 8;  // 16-byte pieces per row
  static constexpr int kTileElems = kKeys * kLd;
  static constexpr int kLoadIters = (kKeys * kChunks + kThreads - 1) / kThreads;
  static constexpr size_t kQBytes = size_t{kRows} * kLd * 2;           // Q, then the O staging
  static constexpr size_t kStageBytes = size_t{2} * kTileElems * 2;    // K then V
  static constexpr size_t kKeyRows = kQBytes + kStages * kStageBytes;  // int [2][kKeys]
  static constexpr size_t kBytes = kKeyRows + size_t{2} * kKeys * sizeof(int);
  static_assert(HD % 16 == 0, "head_dim a multiple of 16");
  static_assert(kQBytes % 128 == 0 && kStageBytes % 128 == 0, "aligned buffers");
};

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads, FlashTraits<HD>::kMinBlocks)
    attention_flash_kernel(const AttentionArgs a, const int32_t* __restrict__ items,
                           const int group, const int q_tile, const float scale_log2) {
  using L = FlashTraits<HD>;
  constexpr int kKSteps = HD / 16;    // k-steps of Q Kᵀ
  constexpr int kOTiles = HD / 8;     // n-tiles of O
  constexpr int kSTiles = kKeys / 8;  // n-tiles of S
  constexpr int kChunks = L::kChunks;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);                         // [kRows][kLd]
  T* kv_s = reinterpret_cast<T*>(smem + L::kQBytes);           // [kStages][K, V][kKeys][kLd]
  int* key_rows = reinterpret_cast<int*>(smem + L::kKeyRows);  // [2][kKeys]

  pdl_wait();  // qkv and the caches come from the previous kernels
  FlashTile f;
  if (!flash_tile<kKeys>(a, items, group, q_tile, f)) return;
  const int n_tiles = f.n_tiles, k_begin = f.k_begin, window = a.sliding_window;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int w0 = warp * 16;
  const int qa = f.query_of(w0 + (lane >> 2));  // this lane's rows: g and g + 8
  const int qb = f.query_of(w0 + (lane >> 2) + 8);
  const int wq_lo = f.query_of(w0), wq_hi = f.query_of(w0 + 15);
  const bool warp_live = f.row_live(w0);

  // Q rows (zero for rows past the tile).
  const T* qkv = static_cast<const T*>(a.qkv);
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i - r * kChunks;
    const bool live = f.row_live(r);
    const T* src = live ? qkv + f.row_offset(r, a.qkv_cols, HD) + c * 8 : qkv;
    cp_async16(smem_u32(q_s + r * L::kLd + c * 8), src, live);
  }
  cp_async_commit();

  // Key rows: key_rows[u & 1][k] is the cache row of key k of tile u (flash_key_row).
  const bool row_thread = tid < kKeys;
  // This thread's key of tile u (past the keys from tile n_tiles on).
  auto key_of = [&](int u) { return k_begin + u * kKeys + tid; };
  auto fetch_block = [&](int u) { return flash_key_block(a, f, key_of(u)); };
  auto put_key_row = [&](int u, int blk) {
    key_rows[(u & 1) * kKeys + tid] = flash_key_row(a, f, key_of(u), blk);
  };
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  auto issue_tile = [&](int u) {  // needs key_rows of tile u visible to every thread
    T* ks = kv_s + (u % L::kStages) * 2 * L::kTileElems;
    T* vs = ks + L::kTileElems;
    const int* rows = key_rows + (u & 1) * kKeys;
#pragma unroll
    for (int p = 0; p < L::kLoadIters; ++p) {
      const int i = tid + p * kThreads;
      if (kKeys * kChunks % kThreads == 0 || i < kKeys * kChunks) {
        const int r = i / kChunks, c = i - r * kChunks;
        const int row = rows[r];
        const int64_t off = row >= 0 ? int64_t{row} * HD + c * 8 : 0;
        cp_async16(smem_u32(ks + r * L::kLd + c * 8), kc + off, row >= 0);
        cp_async16(smem_u32(vs + r * L::kLd + c * 8), vc + off, row >= 0);
      }
    }
  };

  // Prologue: tiles 0 .. kStages - 2 in flight, the key rows of tile kStages - 1 ready.
  static_assert(L::kStages == 2 || L::kStages == 3, "two key-row slots serve 3 stages");
#pragma unroll
  for (int u = 0; u < L::kStages - 1; ++u)
    if (row_thread && u < n_tiles) put_key_row(u, fetch_block(u));
  __syncthreads();
#pragma unroll
  for (int u = 0; u < L::kStages - 1; ++u) {
    if (u < n_tiles) issue_tile(u);
    cp_async_commit();
  }
  __syncthreads();  // tile 0's slot is read; tile 2's may overwrite it
  if (row_thread && L::kStages - 1 < n_tiles)
    put_key_row(L::kStages - 1, fetch_block(L::kStages - 1));
  cp_async_wait<L::kStages - 2>();  // Q and tile 0
  __syncthreads();

  // Pointers for ldmatrix: Q (A operand) rows w0 + (l & 7) + 8 ((l >> 3) & 1), column
  // 8 (l >> 4); K (B operand of Q Kᵀ, non-transposed) keys (l & 7) + 8 (l >> 4),
  // column 8 ((l >> 3) & 1); V (B operand of P V, transposed) keys (l & 7) +
  // 8 ((l >> 3) & 1), column 8 (l >> 4).
  const uint32_t q_addr =
      smem_u32(q_s + (w0 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLd + (lane >> 4) * 8);
  const int k_off = ((lane & 7) + (lane >> 4) * 8) * L::kLd + ((lane >> 3) & 1) * 8;
  const int v_off = ((lane & 7) + ((lane >> 3) & 1) * 8) * L::kLd + (lane >> 4) * 8;

  uint32_t qf[L::kQInRegs ? kKSteps : 1][4];
  if constexpr (L::kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) ldsm_x4(q_addr + kk * 32, qf[kk]);
  }

  float o[kOTiles][4];
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  FlashRows rows;

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<L::kStages - 2>();  // tile t (this thread's part)
    __syncthreads();                  // ... everyone's; tile t - 1's buffer is free
    if (t + L::kStages - 1 < n_tiles) issue_tile(t + L::kStages - 1);
    cp_async_commit();
    const int next = t + L::kStages;  // key rows one tile ahead of their copy
    const int next_blk = row_thread ? fetch_block(next) : 0;

    const int kt = k_begin + t * kKeys;
    const bool visible =
        warp_live && kt <= wq_hi && (window <= 0 || kt + kKeys - 1 > wq_lo - window);
    if (visible) {
      const T* ks = kv_s + (t % L::kStages) * 2 * L::kTileElems;
      const uint32_t k_addr = smem_u32(ks + k_off);
      const uint32_t v_addr = smem_u32(ks + L::kTileElems + v_off);

      float sc[kSTiles][4];
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t qa4[4];
        if constexpr (L::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) qa4[i] = qf[kk][i];
        } else {
          ldsm_x4(q_addr + kk * 32, qa4);
        }
#pragma unroll
        for (int np = 0; np < kSTiles / 2; ++np) {
          uint32_t b[4];  // keys 16 np + 0..7 then 8..15; dims 16 kk + 0..7, 8..15
          ldsm_x4(k_addr + (np * 16 * L::kLd + kk * 16) * 2, b);
          mma_16816<T>(sc[2 * np], qa4, b[0], b[1]);
          mma_16816<T>(sc[2 * np + 1], qa4, b[2], b[3]);
        }
      }

      // Only tiles crossing a row's edge (diagonal, window start, the context's end).
      const bool edge = kt + kKeys - 1 > wq_lo || (window > 0 && kt <= wq_hi - window);
      const float2 alpha = rows.step<kSTiles>([&](int n, int e) -> float& { return sc[n][e]; },
                                              edge, kt, qa, qb, window, scale_log2, lane);
#pragma unroll
      for (int d = 0; d < kOTiles; ++d) {
        o[d][0] *= alpha.x;
        o[d][1] *= alpha.x;
        o[d][2] *= alpha.y;
        o[d][3] *= alpha.y;
      }

      // O += P V: the S accumulators of key tiles 2kk and 2kk + 1 are the A fragment of
      // keys [16 kk, 16 kk + 16).
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const uint32_t pa[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]),
                                pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                                pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          uint32_t b[4];  // dims 16 dp + 0..7 (keys 0..7, 8..15), then dims 16 dp + 8..15
          ldsm_x4_trans(v_addr + (kk * 16 * L::kLd + dp * 16) * 2, b);
          mma_16816<T>(o[2 * dp], pa, b[0], b[1]);
          mma_16816<T>(o[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    }
    // Published by the next iteration's barrier; its slot was last read by the issue of
    // tile next - 2, before this iteration's barrier.
    if (row_thread && next < n_tiles) put_key_row(next, next_blk);
  }
  pdl_launch_dependents();
  cp_async_wait<0>();
  if (!warp_live) return;  // no barrier below: each warp finishes its own rows

  const float2 inv = rows.inverse_sums();
  // O through the warp's own rows of the Q buffer (only this warp reads them), then out
  // in 16-byte pieces: whole rows per lane group, coalesced.
  __syncwarp();
  {
    T* ra = q_s + (w0 + (lane >> 2)) * L::kLd + (lane & 3) * 2;
    T* rb = ra + 8 * L::kLd;
#pragma unroll
    for (int d = 0; d < kOTiles; ++d) {
      *reinterpret_cast<uint32_t*>(ra + d * 8) = pack2<T>(o[d][0] * inv.x, o[d][1] * inv.x);
      *reinterpret_cast<uint32_t*>(rb + d * 8) = pack2<T>(o[d][2] * inv.y, o[d][3] * inv.y);
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
          *reinterpret_cast<const uint4*>(q_s + r * L::kLd + c * 8);
  }
}

size_t smem_bytes(int head_dim) {
  switch (head_dim) {
    case 64:
      return FlashTraits<64>::kBytes;
    case 80:
      return FlashTraits<80>::kBytes;
    case 96:
      return FlashTraits<96>::kBytes;
    case 128:
      return FlashTraits<128>::kBytes;
    case 256:
      return FlashTraits<256>::kBytes;
    default:
      return 0;
  }
}

int64_t dense_blocks(const AttentionArgs& a) {
  const int q_tile = attention_flash_q_tile(a);
  return (int64_t{a.max_query_len} + q_tile - 1) / q_tile * a.num_seqs * a.kv_heads;
}

template <typename T, int HD>
void launch_hd(const AttentionArgs& a, const int32_t* items, int32_t num_items,
               cudaStream_t stream) {
  using L = FlashTraits<HD>;
  auto kernel = attention_flash_kernel<T, HD>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), L::kBytes);
  const int group = a.heads / a.kv_heads;
  const int64_t blocks = items != nullptr ? int64_t{num_items} * a.kv_heads : dense_blocks(a);
  if (blocks == 0) return;
  launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), L::kBytes, stream, a,
                items, group, kRows / group, a.scale * kLog2e);
}

template <typename T>
void launch_typed(const AttentionArgs& a, const int32_t* items, int32_t num_items,
                  cudaStream_t stream) {
  switch (a.head_dim) {
    case 64:
      return launch_hd<T, 64>(a, items, num_items, stream);
    case 80:
      return launch_hd<T, 80>(a, items, num_items, stream);
    case 96:
      return launch_hd<T, 96>(a, items, num_items, stream);
    case 128:
      return launch_hd<T, 128>(a, items, num_items, stream);
    default:
      return launch_hd<T, 256>(a, items, num_items, stream);
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

int attention_flash_q_tile(const AttentionArgs& a) {
  return kRows / (a.heads / a.kv_heads);
}

void attention_flash_items(const AttentionArgs& a, const int32_t* query_start,
                           const int32_t* context_lens, std::vector<int32_t>& items) {
  struct Item {
    int32_t keys, s, j;
  };
  const int q_tile = attention_flash_q_tile(a);
  std::vector<Item> work;
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int32_t q_len = query_start[s + 1] - query_start[s];
    if (a.multi_queries_only && q_len == 1) continue;  // the decode kernel's
    for (int32_t j = 0; j * q_tile < q_len; ++j)       // keys up to the tile's last query
      work.push_back({context_lens[s] - j * q_tile, s, j});
  }
  std::sort(work.begin(), work.end(), [](const Item& x, const Item& y) {
    if (x.keys != y.keys) return x.keys > y.keys;
    return x.s != y.s ? x.s < y.s : x.j < y.j;
  });
  items.resize(kFlashItemInts * work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    const int32_t s = work[i].s;
    int32_t* it = items.data() + kFlashItemInts * i;
    it[0] = s;
    flash_tile_span(query_start[s], query_start[s + 1] - query_start[s], context_lens[s], work[i].j,
                    q_tile, it[1], it[2], it[3]);
  }
}

bool attention_flash_supports(const AttentionArgs& a) {
  if (a.type != DType::kBF16 && a.type != DType::kF16) return false;
  if (a.softcap > 0.f || a.alibi_slopes != nullptr || !(a.scale > 0.f)) return false;
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.heads / a.kv_heads > kRows) return false;
  const size_t smem = smem_bytes(a.head_dim);
  if (smem == 0) return false;
  if (!aligned16(a.qkv) || !aligned16(a.k_cache) || !aligned16(a.v_cache) || !aligned16(a.out) ||
      a.qkv_cols % 8 != 0)
    return false;
  // Cache rows are int32 in the kernel.
  if (a.block_size <= 0 || int64_t{a.num_blocks} * a.kv_heads * a.block_size > INT_MAX)
    return false;
  if (a.max_query_len <= 0 || dense_blocks(a) > INT_MAX) return false;
  return smem <= static_cast<size_t>(max_dynamic_smem());
}

bool launch_attention_flash(const AttentionArgs& a, const int32_t* items, int32_t num_items,
                            cudaStream_t stream) {
  if (!attention_flash_supports(a)) return false;
  if (a.tokens == 0 || a.num_seqs == 0) return true;
  if (launch_attention_flash_wgmma(a, items, num_items, stream)) return true;
  if (a.type == DType::kBF16)
    launch_typed<bf16_t>(a, items, num_items, stream);
  else
    launch_typed<f16_t>(a, items, num_items, stream);
  return true;
}

}  // namespace tachyon::cuda
