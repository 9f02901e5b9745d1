// The merge of split-key attention partials shared by the attention kernels: each split
// leaves per (token, head) row its running max and exp-sum (part_ml, [splits, rows, 2])
// and its unnormalised output (part_o, [splits, rows, hd]).
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {

// Merges the key splits of one (token, head) row with the 32 lanes of the calling warp.
// The lanes read the splits' maxima and sums in parallel (lane s holds split s's weight,
// for the first 32), then each lane accumulates 4 output dims (16-byte loads) over the
// splits; the loads of different splits are independent, so a short decode step's
// merge takes a few memory round trips instead of one per split. Loads go through the
// L2 (ld.global.cg): the decode kernel merges partials that other blocks of its own grid
// wrote.
template <typename T>
__device__ __forceinline__ void merge_split_row(const float* part_o, const float* part_ml,
                                                int splits, int64_t rows, int64_t row, int hd,
                                                T* out, int lane) {
  const float2* ml = reinterpret_cast<const float2*>(part_ml);
  float m_max = -INFINITY;
  for (int s = lane; s < splits; s += 32) {
    const float2 v = __ldcg(ml + s * rows + row);
    if (v.y > 0.f) m_max = fmaxf(m_max, v.x);
  }
  m_max = warp_max(m_max);
  auto weight = [&](int s) {
    const float2 v = __ldcg(ml + s * rows + row);
    return v.y > 0.f ? __expf(v.x - m_max) : 0.f;
  };
  float total = 0.f, w_lane = 0.f;
  for (int s = lane; s < splits; s += 32) {
    const float w = weight(s);
    total += w * __ldcg(ml + s * rows + row).y;
    if (s < 32) w_lane = w;
  }
  total = warp_sum(total);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  const float* po = part_o + row * hd;
  const int64_t split_stride = rows * hd;
  if (hd % 4 == 0) {
    for (int base = 0; base < hd; base += 128) {
      const int d0 = base + 4 * lane;
      const bool active = d0 < hd;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s = 0; s < splits; ++s) {
        const float w = s < 32 ? __shfl_sync(0xffffffffu, w_lane, s) : weight(s);
        if (active && w != 0.f) {
          const float4 o = __ldcg(reinterpret_cast<const float4*>(po + s * split_stride + d0));
          acc.x += w * o.x;
          acc.y += w * o.y;
          acc.z += w * o.z;
          acc.w += w * o.w;
        }
      }
      if (active) {
        T* dst = out + row * hd + d0;
        dst[0] = from_f<T>(acc.x * inv);
        dst[1] = from_f<T>(acc.y * inv);
        dst[2] = from_f<T>(acc.z * inv);
        dst[3] = from_f<T>(acc.w * inv);
      }
    }
    return;
  }
  for (int base = 0; base < hd; base += 32) {
    const int d = base + lane;
    float acc = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float w = s < 32 ? __shfl_sync(0xffffffffu, w_lane, s) : weight(s);
      if (d < hd && w != 0.f) acc += w * __ldcg(po + s * split_stride + d);
    }
    if (d < hd) out[row * hd + d] = from_f<T>(acc * inv);
  }
}

// The merge as its own kernel: one warp per (token, head). It waits for the kernel before
// it (pdl_wait: a no-op unless launched with programmatic dependent launch).
template <typename T>
__global__ void combine_splits_kernel(const float* __restrict__ part_o,
                                      const float* __restrict__ part_ml, int splits, int64_t tokens,
                                      int heads, int hd, T* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int64_t rows = tokens * heads;
  if (row >= rows) return;
  merge_split_row<T>(part_o, part_ml, splits, rows, row, hd, out, threadIdx.x & 31);
}

}  // namespace tachyon::cuda
