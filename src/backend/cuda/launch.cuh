// Kernel launches with programmatic dependent launch (PDL, sm_90 and later).
//
// A kernel launched through launch_kernel() may be scheduled while the kernel before it
// on the stream is still finishing (its last blocks), so its launch latency and its
// prologue overlap the previous kernel's tail. That is only safe because every such
// kernel calls pdl_wait() before it reads anything an earlier kernel wrote or writes
// anything an earlier kernel may still read; work that touches only data no kernel of
// the step writes (weights) may come before it. pdl_wait() returns once every
// preceding kernel has completed and its writes are visible, so a chain of such
// kernels keeps stream order. A kernel calls pdl_launch_dependents() when the next
// kernel may start being scheduled (its blocks then wait in pdl_wait()).
//
// Off (plain stream-ordered launches) before sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {

// Whether launch_kernel() asks for programmatic dependent launch (set once per process
// by the backend from the device's compute capability).
bool pdl_enabled();
void set_pdl_enabled(bool on);

// The largest dynamic shared memory a block may opt into on the current device (read
// once per device).
int max_dynamic_smem();
// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device:
// raises its limit above the default 48 KB once per (kernel, device) and size, not at
// every launch. A host-side setting, allowed while a graph is being recorded.
void allow_dynamic_smem(const void* kernel, size_t bytes);
// Blocks of `kernel` (`threads` each, `smem` bytes of dynamic shared memory) that the
// current device holds at once, over all its SMs (asked once per thread, kernel, device
// and size; its shared-memory limit raised first, allow_dynamic_smem).
int resident_blocks(const void* kernel, int threads, size_t smem);
// Whether the current device runs `kernel` from its sm_90a image (not from code compiled
// at load time from an older architecture's PTX): the kernels on Hopper's wgmma, TMA and
// setmaxnreg exist only there. Callers keep the answer (one device per process).
bool runs_sm90a_image(const void* kernel);
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The launch attribute that groups a grid's blocks in clusters of `cluster` blocks.
inline cudaLaunchAttribute cluster_attribute(dim3 cluster) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster.x;
  attr.val.clusterDim.y = cluster.y;
  attr.val.clusterDim.z = cluster.z;
  return attr;
}

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when enabled, as clusters of
// `cluster` blocks when that is not 1 x 1 x 1 (the grid a multiple of it; sizes above
// 8 need the kernel's non-portable cluster attribute). The kernel must call pdl_wait()
// as described above.
template <typename... Params, typename... Args>
void launch_kernel_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster.x * cluster.y * cluster.z > 1) attr[n++] = cluster_attribute(cluster);
  cfg.attrs = attr;
  cfg.numAttrs = n;
  TACHYON_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  launch_kernel_clustered(kernel, grid, block, smem, stream, dim3(1, 1, 1),
                          std::forward<Args>(args)...);
}

}  // namespace tachyon::cuda
