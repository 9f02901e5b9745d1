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
constexpr int kPassCols = 16;  // columns per pass of a warp (two n tiles)
constexpr int kPasses = 4;
constexpr int kBlockCols = kWarps * kPassCols * kPasses;

// The padded k extent of the staged rows (a multiple of 16) and their row stride in
// elements (8 more: rows land on different banks).
__host__ __device__ inline int staged_k(int pr) {
  return (pr + 15) / 16 * 16;
}
__host__ __device__ inline int staged_ld(int pr) {
  return staged_k(pr) + 8;
}

// Block (tile of kTile tokens, kBlockCols columns), warp w: kPasses passes of kPassCols
// columns. Per distinct slot u of the tile: its shrunk rows staged in shared memory as
// hi/lo pairs (zero for the tile's other tokens and past each part's rank), then per pass:
// the outputs of the 16-row m tiles holding tokens of u loaded, D [16, 8] per m and n
// tile over the k steps of the parts the pass's columns belong to (B's entries of another
// part than the column's are zero), out = old + D rounded once, for u's tokens only.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    lora_expand_mma(LoraShape sh, const T* __restrict__ arena, const float* __restrict__ part,
                    T* __restrict__ out, int64_t ldo, bool pairs, int* err) {
  extern __shared__ uint4 smem[];
  const int pr = sh.parts * sh.r, kp = staged_k(pr), ld = staged_ld(pr);
  T* shi = reinterpret_cast<T*>(smem);
  T* slo = shi + kTile * ld;
  pdl_launch_dependents();
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int n = static_cast<int>(sh.t - t0 < kTile ? sh.t - t0 : kTile);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane / 4, ti = lane % 4;
  const int64_t cw = static_cast<int64_t>(blockIdx.y) * kBlockCols + warp * kPassCols * kPasses;
  TileSlots ts =
      load_tile_slots(sh.row_slots, t0, n, sh.slots, err, threadIdx.x < 32 && blockIdx.y == 0);
  uint64_t mask = 0;
  int slot = next_slot(ts, mask);
  PartRanks rk{};
  if (slot >= 0) rk = slot_ranks(sh, slot, err);
  pdl_wait();
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
    __syncthreads();
    const T* bs = arena + slot * sh.row_elems + sh.b_offset;
    for (int pass = 0; pass < kPasses; ++pass) {
      const int64_t c0 = cw + pass * kPassCols;
      if (c0 >= sh.n) break;  // warp-uniform
      // This lane's columns (two per n tile) and B's column (one per n tile).
      int64_t cb[2];
      int pb[2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        cb[nt] = c0 + nt * 8 + g;
        pb[nt] = cb[nt] < sh.n ? part_of(sh, cb[nt]) : -1;
      }
      const int p_lo = part_of(sh, c0);
      const int p_hi = part_of(sh, c0 + kPassCols - 1 < sh.n ? c0 + kPassCols - 1 : sh.n - 1);
      const int ks0 = p_lo * sh.r / 16, ks1 = ((p_hi + 1) * sh.r + 15) / 16;
      // Whether this lane's output columns change (in range, of a part of nonzero rank).
      bool put[2][2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t c = c0 + nt * 8 + 2 * ti + e;
          put[nt][e] = c < sh.n && rk.of(part_of(sh, c)) > 0;
        }
      // The old outputs of u's rows: [m tile][n tile][row g, g + 8][column pair].
      float acc[4][2][4];
      T ov[4][2][4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        if (((mask >> (16 * mt)) & 0xffffu) == 0) continue;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int64_t c = c0 + nt * 8 + 2 * ti;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = mt * 16 + g + 8 * h;
            acc[mt][nt][2 * h] = acc[mt][nt][2 * h + 1] = 0.f;
            if (!((mask >> row) & 1)) continue;
            const T* o = out + (t0 + row) * ldo + c;
            if (pairs && put[nt][0] && put[nt][1]) {
              const uint32_t w = *reinterpret_cast<const uint32_t*>(o);
              ov[mt][nt][2 * h] = *reinterpret_cast<const T*>(&w);
              ov[mt][nt][2 * h + 1] = reinterpret_cast<const T*>(&w)[1];
            } else {
              if (put[nt][0]) ov[mt][nt][2 * h] = o[0];
              if (put[nt][1]) ov[mt][nt][2 * h + 1] = o[1];
            }
          }
        }
      }
      for (int ks = ks0; ks < ks1; ++ks) {
        uint32_t b[2][2];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int k = ks * 16 + 8 * h + 2 * ti, pk = k / sh.r;
            b[nt][h] = pk == pb[nt] ? __ldg(reinterpret_cast<const unsigned int*>(
                                          bs + cb[nt] * sh.r + (k - pk * sh.r)))
                                    : 0u;
          }
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          if (((mask >> (16 * mt)) & 0xffffu) == 0) continue;
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
          for (int nt = 0; nt < 2; ++nt) {
            mma_16816<T>(acc[mt][nt], ahi, b[nt][0], b[nt][1]);
            mma_16816<T>(acc[mt][nt], alo, b[nt][0], b[nt][1]);
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        if (((mask >> (16 * mt)) & 0xffffu) == 0) continue;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int64_t c = c0 + nt * 8 + 2 * ti;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = mt * 16 + g + 8 * h;
            if (!((mask >> row) & 1)) continue;
            T* o = out + (t0 + row) * ldo + c;
            const T lo = from_f<T>(to_f(ov[mt][nt][2 * h]) + acc[mt][nt][2 * h]);
            const T hi = from_f<T>(to_f(ov[mt][nt][2 * h + 1]) + acc[mt][nt][2 * h + 1]);
            if (pairs && put[nt][0] && put[nt][1]) {
              T w[2] = {lo, hi};
              *reinterpret_cast<uint32_t*>(o) = *reinterpret_cast<const uint32_t*>(w);
            } else {
              if (put[nt][0]) o[0] = lo;
              if (put[nt][1]) o[1] = hi;
            }
          }
        }
      }
    }
    slot = next_slot(ts, mask);
    if (slot >= 0) rk = slot_ranks(sh, slot, err);
    __syncthreads();  // the staged rows are rewritten next
  }
}

template <typename T>
void launch_typed(const LoraShape& sh, const void* arena, const float* part, void* out, int64_t ldo,
                  int* err, cudaStream_t stream) {
  const int pr = sh.parts * sh.r;
  const size_t smem = 2 * sizeof(T) * kTile * staged_ld(pr);
  allow_dynamic_smem(reinterpret_cast<const void*>(lora_expand_mma<T>), smem);
  // Column pairs as one 4-byte access where every row keeps them aligned.
  const bool pairs = reinterpret_cast<uintptr_t>(out) % 4 == 0 && ldo % 2 == 0;
  const dim3 grid(static_cast<unsigned>((sh.t + kTile - 1) / kTile),
                  static_cast<unsigned>((sh.n + kBlockCols - 1) / kBlockCols));
  launch_kernel(lora_expand_mma<T>, grid, dim3(kWarps * 32), smem, stream, sh,
                static_cast<const T*>(arena), part, static_cast<T*>(out), ldo, pairs, err);
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
