// The merge of split-key attention partials shared by the attention kernels: each split
// leaves per (token, head) row its running max and exp-sum (part_ml, [splits, rows, 2])
// and its unnormalised output (part_o, [splits, rows, hd]). It waits for the kernel
// before it (pdl_wait: a no-op unless launched with programmatic dependent launch).
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {

// Merges the key splits: one warp per (token, head).
template <typename T>
__global__ void combine_splits_kernel(const float* __restrict__ part_o,
                                      const float* __restrict__ part_ml, int splits, int64_t tokens,
                                      int heads, int hd, T* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  const int64_t rows = tokens * heads;
  if (row >= rows) return;
  float m_max = -INFINITY;
  for (int s = 0; s < splits; ++s) {
    const float* ml = part_ml + 2 * (s * rows + row);
    if (ml[1] > 0.f) m_max = fmaxf(m_max, ml[0]);
  }
  float total = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float* ml = part_ml + 2 * (s * rows + row);
    if (ml[1] > 0.f) total += __expf(ml[0] - m_max) * ml[1];
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  for (int d = lane; d < hd; d += 32) {
    float acc = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float* ml = part_ml + 2 * (s * rows + row);
      if (ml[1] > 0.f) acc += __expf(ml[0] - m_max) * part_o[(s * rows + row) * hd + d];
    }
    out[row * hd + d] = from_f<T>(acc * inv);
  }
}

}  // namespace tachyon::cuda
