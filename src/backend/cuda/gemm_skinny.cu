// Products with few rows (decode batches of 2..128 sequences): y[m, n] = x[m, k] w[n, k]^T
// with the weights streamed from memory once at close to the bandwidth. At these m a
// product does m FLOPs per weight byte, below the GPU's ratio of arithmetic to
// bandwidth, so what matters is keeping enough weight bytes in flight on every SM.
//
// A block of 8 warps owns 128 weight rows (output columns) and one range of k (a split:
// small n gets several splits so that every SM has blocks). Weight and x tiles of 64
// k-columns go through a cp.async pipeline of kStages shared-memory stages (rows of 128
// bytes, 16-byte chunks XOR-swizzled by row so that ldmatrix reads no bank twice); each
// warp multiplies its 16 weight rows with all (padded) rows of x on the tensor cores
// (mma.sync m16n8k16, the weight tile as A, x as the column-major B), f32 accumulators.
// With splits, each block leaves f32 partials and the last block of a column tile (a
// counter per tile, reset by that block) sums them into y.
//
// The weights do not depend on earlier kernels: the first stages' weight tiles are
// requested before pdl_wait() (launch.cuh), x's after.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_util.cuh"

namespace tachyon::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kTileN = 128;    // weight rows per block (16 per warp)
constexpr int kTileK = 64;     // k per stage: 128-byte rows
constexpr int kMaxSplits = 16;

// Byte offset of 16-byte chunk c (0..7) of row r in a tile of 128-byte rows.
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

struct SkinnyArgs {
  const void* x;
  const void* w;
  void* y;
  float* partial;  // [splits, tiles, kM, kTileN] when splits > 1
  int* counters;   // [tiles], zero between launches
  int m, n, k, ldy;
  int splits;
  bool y_f32;
};

template <typename T, int kM>
constexpr int stages() {
  return kM >= 128 ? 3 : 4;
}

template <typename T, int kM>
constexpr size_t smem_bytes() {
  return static_cast<size_t>(stages<T, kM>()) * (kTileN + kM) * 128;
}

template <typename T, int kM>
__global__ void __launch_bounds__(kThreads) skinny_kernel(const SkinnyArgs a) {
  constexpr int kStages = stages<T, kM>();
  constexpr int kStageBytes = (kTileN + kM) * 128;
  constexpr int kNT = kM / 8;  // n8 tiles of x rows
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tile = blockIdx.x, split = blockIdx.y;
  const int n0 = tile * kTileN;
  const int chunks = a.k / kTileK;
  const int c_begin = static_cast<int>(int64_t{chunks} * split / a.splits);
  const int c_end = static_cast<int>(int64_t{chunks} * (split + 1) / a.splits);
  const int count = c_end - c_begin;
  const T* w = static_cast<const T*>(a.w);
  const T* x = static_cast<const T*>(a.x);
  const uint32_t base = smem_u32(smem);

  auto load_w = [&](int stage, int chunk) {
    const uint32_t dst = base + stage * kStageBytes;
#pragma unroll
    for (int i = 0; i < kTileN * 8 / kThreads; ++i) {
      const int id = tid + i * kThreads, r = id >> 3, c = id & 7;
      const int row = n0 + r;
      const T* src = w + int64_t{row < a.n ? row : 0} * a.k + chunk * kTileK + c * 8;
      cp_async16(dst + swz(r, c), src, row < a.n);
    }
  };
  auto load_x = [&](int stage, int chunk) {
    const uint32_t dst = base + stage * kStageBytes + kTileN * 128;
#pragma unroll
    for (int i = 0; i < (kM * 8 + kThreads - 1) / kThreads; ++i) {
      const int id = tid + i * kThreads;
      if (kM * 8 % kThreads != 0 && id >= kM * 8) break;
      const int r = id >> 3, c = id & 7;
      const T* src = x + int64_t{r < a.m ? r : 0} * a.k + chunk * kTileK + c * 8;
      cp_async16(dst + swz(r, c), src, r < a.m);
    }
  };

  // Weights of the first stages before the dependency wait, x after; group s holds
  // stage s's x (and, for s = 0, every early weight tile).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < count) load_w(s, c_begin + s);
  pdl_wait();
  pdl_launch_dependents();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) load_x(s, c_begin + s);
    cp_async_commit();
  }

  float acc[kNT][4];
#pragma unroll
  for (int j = 0; j < kNT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  // Per-lane ldmatrix rows: A (weights) rows warp*16 + (lane & 15), chunk half lane >> 4;
  // B (x) rows (lane & 7) + ((lane >> 4) << 3), chunk half (lane >> 3) & 1.
  const int a_row = warp * 16 + (lane & 15), a_half = lane >> 4;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;

  for (int i = 0; i < count; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int next = i + kStages - 1;
      if (next < count) {
        load_w(next % kStages, c_begin + next);
        load_x(next % kStages, c_begin + next);
      }
      cp_async_commit();
    }
    const uint32_t ws = base + (i % kStages) * kStageBytes;
    const uint32_t xs = ws + kTileN * 128;
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      uint32_t af[4];
      ldsm_x4(ws + swz(a_row, 2 * kk + a_half), af);
#pragma unroll
      for (int j = 0; j < kNT; j += 2) {
        uint32_t b[4];
        ldsm_x4(xs + swz(j * 8 + b_row, 2 * kk + b_half), b);
        mma_16816<T>(acc[j], af, b[0], b[1]);
        mma_16816<T>(acc[j + 1], af, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

  // acc[j]: weight rows r0 = warp*16 + lane/4 (+8 for [2], [3]), x rows j*8 + 2(lane%4) (+1).
  const int g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16 + g;
  if (a.splits == 1) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int mr = j * 8 + 2 * t + (e & 1), nc = n0 + r0 + (e >> 1) * 8;
        if (mr < a.m && nc < a.n) {
          if (a.y_f32)
            static_cast<float*>(a.y)[int64_t{mr} * a.ldy + nc] = acc[j][e];
          else
            static_cast<T*>(a.y)[int64_t{mr} * a.ldy + nc] = from_f<T>(acc[j][e]);
        }
      }
    }
    return;
  }
  // Partials [split][tile][kM][kTileN]; the last block of the tile reduces.
  float* part = a.partial + (int64_t{split} * gridDim.x + tile) * (kM * kTileN);
#pragma unroll
  for (int j = 0; j < kNT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      part[(j * 8 + 2 * t + (e & 1)) * kTileN + r0 + (e >> 1) * 8] = acc[j][e];
  if (!last_block_arrives(a.counters + tile, a.splits)) return;
  const int rows = min(a.m, kM);
  for (int id = tid; id < rows * kTileN; id += kThreads) {
    const int mr = id / kTileN, nc = id % kTileN;
    float s = 0.f;
    for (int sp = 0; sp < a.splits; ++sp)
      s += __ldcg(a.partial + (int64_t{sp} * gridDim.x + tile) * (kM * kTileN) + id);
    if (n0 + nc < a.n) {
      if (a.y_f32)
        static_cast<float*>(a.y)[int64_t{mr} * a.ldy + n0 + nc] = s;
      else
        static_cast<T*>(a.y)[int64_t{mr} * a.ldy + n0 + nc] = from_f<T>(s);
    }
  }
}

int padded_rows(int64_t m) {
  return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128;
}

int pick_splits(int64_t n, int64_t k, int num_sms) {
  const int64_t tiles = (n + kTileN - 1) / kTileN, chunks = k / kTileK;
  // About three blocks per SM, at least 4 stages of k per split.
  int64_t s = (3 * int64_t{num_sms} + tiles / 2) / tiles;
  s = std::min<int64_t>({s, chunks / 4, kMaxSplits});
  return static_cast<int>(std::max<int64_t>(s, 1));
}

template <typename T, int kM>
void launch_typed(const SkinnyArgs& a, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<T, kM>();
  allow_dynamic_smem(reinterpret_cast<const void*>(skinny_kernel<T, kM>), smem);
  const dim3 grid(static_cast<unsigned>((a.n + kTileN - 1) / kTileN),
                  static_cast<unsigned>(a.splits));
  launch_kernel(skinny_kernel<T, kM>, grid, dim3(kThreads), smem, stream, a);
}

}  // namespace

bool skinny_gemm_supports(DType type, DType y_type, int64_t m, int64_t n, int64_t k, const void* x,
                          const void* w, int64_t ldy) {
  if (type != DType::kBF16 && type != DType::kF16) return false;
  if (y_type != type && y_type != DType::kF32) return false;
  if (m < 1 || m > kSkinnyMaxRows || k % kTileK != 0 || k / kTileK < 4) return false;
  if (n > (int64_t{1} << 30) || k > (int64_t{1} << 30) || ldy > (int64_t{1} << 30)) return false;
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

SkinnyPlan plan_skinny_gemm(int64_t m, int64_t n, int64_t k, int num_sms) {
  SkinnyPlan p;
  p.splits = pick_splits(n, k, num_sms);
  const int64_t tiles = (n + kTileN - 1) / kTileN;
  if (p.splits > 1) {
    p.partial_bytes = static_cast<size_t>(p.splits) * static_cast<size_t>(tiles) *
                      static_cast<size_t>(padded_rows(m)) * kTileN * sizeof(float);
    p.counter_count = tiles;
  }
  return p;
}

void launch_skinny_gemm(const void* x, const void* w, DType type, void* y, DType y_type, int64_t m,
                        int64_t n, int64_t k, int64_t ldy, const SkinnyPlan& plan, void* partial,
                        int* counters, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  TACHYON_KERNEL_CHECK(skinny_gemm_supports(type, y_type, m, n, k, x, w, ldy),
                       "skinny_gemm: unsupported arguments");
  TACHYON_KERNEL_CHECK(plan.splits == 1 || (partial != nullptr && counters != nullptr),
                       "skinny_gemm: split products need partials and counters");
  SkinnyArgs a{x,
               w,
               y,
               static_cast<float*>(partial),
               counters,
               static_cast<int>(m),
               static_cast<int>(n),
               static_cast<int>(k),
               static_cast<int>(ldy),
               plan.splits,
               y_type == DType::kF32};
  auto by_rows = [&](auto tag) {
    using T = decltype(tag);
    switch (padded_rows(m)) {
      case 16:
        launch_typed<T, 16>(a, stream);
        break;
      case 32:
        launch_typed<T, 32>(a, stream);
        break;
      case 64:
        launch_typed<T, 64>(a, stream);
        break;
      default:
        launch_typed<T, 128>(a, stream);
        break;
    }
  };
  if (type == DType::kBF16)
    by_rows(bf16_t{});
  else
    by_rows(f16_t{});
}

}  // namespace tachyon::cuda
