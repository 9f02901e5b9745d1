// The prefill expand of the low-rank adapters (T > kGroupedRows, bf16 and f16) on the
// tensor cores: out[t, c] += sum_j B_s[c, j] s[t, p R + j] as mma.sync m16n8k16 with f32
// accumulators, the shrunk rows s (f32) split into a high and a low part in the
// activation dtype (s = hi + lo to about 16 bits, two products each), so that the sum
// keeps the shrink's precision. s is taken below the activation dtype's largest value.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/lora_device.cuh"
#include "backend/cuda/mma_util.cuh"

namespace tachyon::cuda::lora {
namespace {

constexpr int kWarps = 8;
constexpr int kNTiles = 4;  // n tiles of 8 columns per warp
constexpr int kBlockCols = kWarps * kNTiles * 8;

// The padded k extent of the staged rows (a multiple of 16) and their row stride in
// elements (8 more: rows land on different banks).
__host__ __device__ inline int staged_k(int pr) {
  return (pr + 15) / 16 * 16;
}
__host__ __device__ inline int staged_ld(int pr) {
  return staged_k(pr) + 8;
}

// The shared memory of a block: the output tile's deltas D [kTile, kBlockCols + kDPad]
// f32, the parts each row's slot adapts (a bit per part), then the staged rows hi and lo
// [kTile, ld] in the activation dtype.
constexpr int kDPad = 8;  // (a half-warp's float2 stores of 4 rows land on distinct banks)
constexpr int kDLd = kBlockCols + kDPad;
__host__ __device__ inline size_t expand_smem(int pr, int elem) {
  return sizeof(float) * kTile * kDLd + sizeof(int) * kTile +
         2 * static_cast<size_t>(elem) * kTile * staged_ld(pr);
}

// 16-byte pieces of the output tile per thread: kTile rows of kBlockCols / 8 pieces.
constexpr int kPieces = kTile * kBlockCols / 8 / (kWarps * 32);

// Block (tile of kTile tokens, kBlockCols columns). The old outputs of the tile's adapted
// rows are loaded first, 16 bytes a lane along the rows (the kernel is bound by this
// read-modify-write). Per distinct slot u of the tile: its shrunk rows staged in shared
// memory as hi/lo pairs (zero for the tile's other tokens and past each part's rank);
// warp w takes kNTiles * 8 columns and, per m tile holding tokens of u, D [16, 8] per n
// tile over the k steps of the parts of its columns (B's entries of another part than the
// column's are zero), kept in shared memory for u's rows. Last, out = old + D rounded once
// where the row's slot adapts the column's part (the old bits elsewhere), stored as the
// pieces were loaded.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32, 2)
    lora_expand_mma(LoraShape sh, const T* __restrict__ arena, const float* __restrict__ part,
                    T* __restrict__ out, int64_t ldo, bool vec, int* err) {
  extern __shared__ uint4 smem[];
  const int pr = sh.parts * sh.r, kp = staged_k(pr), ld = staged_ld(pr);
  float* dt = reinterpret_cast<float*>(smem);
  int* row_parts = reinterpret_cast<int*>(dt + kTile * kDLd);
  T* shi = reinterpret_cast<T*>(row_parts + kTile);
  T* slo = shi + kTile * ld;
  pdl_launch_dependents();
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int n = static_cast<int>(sh.t - t0 < kTile ? sh.t - t0 : kTile);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane / 4, ti = lane % 4;
  const int64_t cb = static_cast<int64_t>(blockIdx.y) * kBlockCols;  // the block's first column
  const int cw = warp * kNTiles * 8;                                 // the warp's, in the block
  TileSlots ts =
      load_tile_slots(sh.row_slots, t0, n, sh.slots, err, threadIdx.x < 32 && blockIdx.y == 0);
  const uint64_t adapted = ts.pending;
  uint64_t mask = 0;
  int slot = next_slot(ts, mask);
  PartRanks rk{};
  if (slot >= 0) rk = slot_ranks(sh, slot, err);
  // B's column of each n tile and its part (2 bits each, 3: past N).
  uint32_t pb = 0;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int64_t c = cb + cw + nt * 8 + g;
    pb |= static_cast<uint32_t>(c < sh.n ? part_of(sh, c) : 3) << (2 * nt);
  }
  const bool any = cb + cw < sh.n;  // warp-uniform
  const int p_lo = any ? part_of(sh, cb + cw) : 0;
  const int64_t c_last = cb + cw + kNTiles * 8 - 1 < sh.n ? cb + cw + kNTiles * 8 - 1 : sh.n - 1;
  const int p_hi = any ? part_of(sh, c_last) : -1;
  pdl_wait();
  // The old outputs: piece i of this thread is row warp + kWarps i, columns 8 lane.
  const int64_t cl = cb + 8 * lane;
  const bool full = vec && cl + 8 <= sh.n;
  uint4 ov[kPieces];
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int row = warp + kWarps * i;
    ov[i] = make_uint4(0, 0, 0, 0);
    if (!((adapted >> row) & 1) || cl >= sh.n) continue;
    const T* o = out + (t0 + row) * ldo + cl;
    if (full) {
      ov[i] = *reinterpret_cast<const uint4*>(o);
    } else {
      uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (cl + e < sh.n)
          w[e / 2] |= static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(o)[e])
                      << (16 * (e % 2));
      ov[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  while (slot >= 0) {
    for (int e = threadIdx.x; e < kTile * kp; e += blockDim.x) {
      const int row = e / kp, k = e % kp;
      float v = 0.f;
      if (k < pr && ((mask >> row) & 1) && k % sh.r < rk.of(k / sh.r))
        v = part[(t0 + row) * pr + k];
      const T hi = from_f<T>(v);
      shi[row * ld + k] = hi;
      slo[row * ld + k] = from_f<T>(v - to_f(hi));
    }
    if (threadIdx.x < kTile && ((mask >> threadIdx.x) & 1))
      row_parts[threadIdx.x] = (rk.r[0] > 0) | (rk.r[1] > 0) << 1 | (rk.r[2] > 0) << 2;
    __syncthreads();
    const T* bs = arena + slot * sh.row_elems + sh.b_offset;
    const int ks0 = p_lo * sh.r / 16, ks1 = ((p_hi + 1) * sh.r + 15) / 16;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      if (!any || ((mask >> (16 * mt)) & 0xffffu) == 0) continue;
      float acc[kNTiles][4];
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
      for (int ks = ks0; ks < ks1; ++ks) {
        uint32_t b[kNTiles][2];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int k = ks * 16 + 8 * h + 2 * ti, pk = k / sh.r;
            b[nt][h] = pk == static_cast<int>(pb >> (2 * nt) & 3u)
                           ? __ldg(reinterpret_cast<const unsigned int*>(
                                 bs + (cb + cw + nt * 8 + g) * sh.r + (k - pk * sh.r)))
                           : 0u;
          }
        const int a0 = (mt * 16 + g) * ld + ks * 16 + 2 * ti;
        const uint32_t ahi[4] = {*reinterpret_cast<const uint32_t*>(shi + a0),
                                 *reinterpret_cast<const uint32_t*>(shi + a0 + 8 * ld),
                                 *reinterpret_cast<const uint32_t*>(shi + a0 + 8),
                                 *reinterpret_cast<const uint32_t*>(shi + a0 + 8 * ld + 8)};
        const uint32_t alo[4] = {*reinterpret_cast<const uint32_t*>(slo + a0),
                                 *reinterpret_cast<const uint32_t*>(slo + a0 + 8 * ld),
                                 *reinterpret_cast<const uint32_t*>(slo + a0 + 8),
                                 *reinterpret_cast<const uint32_t*>(slo + a0 + 8 * ld + 8)};
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          mma_16816<T>(acc[nt], ahi, b[nt][0], b[nt][1]);
          mma_16816<T>(acc[nt], alo, b[nt][0], b[nt][1]);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = mt * 16 + g + 8 * h;
        if (!((mask >> row) & 1)) continue;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
          *reinterpret_cast<float2*>(dt + row * kDLd + cw + nt * 8 + 2 * ti) =
              make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]);
      }
    }
    slot = next_slot(ts, mask);
    if (slot >= 0) rk = slot_ranks(sh, slot, err);
    __syncthreads();  // the staged rows are rewritten next; D complete after the last
  }
  if (cl >= sh.n) return;
  // The parts of this thread's 8 columns (2 bits each).
  uint32_t pc = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) pc |= static_cast<uint32_t>(part_of(sh, cl + e)) << (2 * e);
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int row = warp + kWarps * i;
    if (!((adapted >> row) & 1)) continue;
    const int parts = row_parts[row];
    const float4 d0 = *reinterpret_cast<const float4*>(dt + row * kDLd + 8 * lane);
    const float4 d1 = *reinterpret_cast<const float4*>(dt + row * kDLd + 8 * lane + 4);
    const float d[8] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w};
    const uint32_t w[4] = {ov[i].x, ov[i].y, ov[i].z, ov[i].w};
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 old = unpack2<T>(w[q]);
      const uint32_t v = pack2<T>(old.x + d[2 * q], old.y + d[2 * q + 1]);
      const bool k0 = (parts >> (pc >> (4 * q) & 3u)) & 1,
                 k1 = (parts >> (pc >> (4 * q + 2) & 3u)) & 1;
      r[q] = (k0 ? v & 0xffffu : w[q] & 0xffffu) | (k1 ? v & 0xffff0000u : w[q] & 0xffff0000u);
    }
    T* o = out + (t0 + row) * ldo + cl;
    if (full) {
      *reinterpret_cast<uint4*>(o) = make_uint4(r[0], r[1], r[2], r[3]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (cl + e < sh.n)
          reinterpret_cast<uint16_t*>(o)[e] = static_cast<uint16_t>(r[e / 2] >> (16 * (e % 2)));
    }
  }
}

template <typename T>
void launch_typed(const LoraShape& sh, const void* arena, const float* part, void* out, int64_t ldo,
                  int* err, cudaStream_t stream) {
  const size_t smem = expand_smem(sh.parts * sh.r, static_cast<int>(sizeof(T)));
  allow_dynamic_smem(reinterpret_cast<const void*>(lora_expand_mma<T>), smem);
  // 16-byte pieces where every row keeps them aligned.
  const bool vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 && ldo % 8 == 0;
  const dim3 grid(static_cast<unsigned>((sh.t + kTile - 1) / kTile),
                  static_cast<unsigned>((sh.n + kBlockCols - 1) / kBlockCols));
  launch_kernel(lora_expand_mma<T>, grid, dim3(kWarps * 32), smem, stream, sh,
                static_cast<const T*>(arena), part, static_cast<T*>(out), ldo, vec, err);
}

}  // namespace

void launch_expand_mma(const LoraShape& sh, DType type, const void* arena, const float* part,
                       void* out, int64_t ldo, int* err, cudaStream_t stream) {
  if (type == DType::kBF16)
    launch_typed<bf16_t>(sh, arena, part, out, ldo, err, stream);
  else
    launch_typed<f16_t>(sh, arena, part, out, ldo, err, stream);
}

}  // namespace tachyon::cuda::lora
