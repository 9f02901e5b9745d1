// A diagnostic form of the wgmma flash kernel (attention_flash_wgmma.cu): per block, where
// its time goes, on the SM's cycle counter. Built only with -DTACHYON_FLASH_PROBE=ON (a
// CMake option; `PROBE=1 scripts/gpu_build.sh`); in every other build kFlashProbe is
// false and none of it is compiled in.
//
// With TACHYON_FLASH_PROBE=PREFIX in the environment, each launch of the kernel (outside
// graph capture) fills one record of kProbeWords 32-bit words per block, and the next
// launch, or process exit, writes it to PREFIX.<blocks> (the last launch of each grid
// size: one file per attention shape). bench/gpu/flash_probe.py reads them.
//
// A record (cycles are clock() differences on the block's SM, so they wrap after ~2 s):
//   0-1   %globaltimer at entry (ns), 9-10 at the end of the O store
//   2     %smid, 3 the block's key tiles
//   4-8   thread 0's cycles from entry: work item read (after the wait for the previous
//         kernel), Q in registers, first K tile landed, last P V done, O stored
//   12-18 warpgroup 0's lane 0, summed over its tiles: waiting for K, waiting for V,
//         waiting for its turn, issue to S ready, S ready to its own P V done, the
//         softmax, the rest (O rescale, P packing, stage release). The probe build waits
//         for P V right after S (ptxas puts that wait at the top of the softmax anyway,
//         the SASS shows), so the two products' times come apart.
//   19-25 the same for warpgroup 1
//   26-27 the K loader's thread 0: waiting for an empty stage, issuing copies
//   28-29 the same for the V loader
// Reading the counter perturbs the schedule a little: time the probe build against a
// normal one in the same call before reading much into small differences.
#pragma once

#include <cstdint>

#ifndef TACHYON_FLASH_PROBE
#define TACHYON_FLASH_PROBE 0
#endif

#if TACHYON_FLASH_PROBE
#include <cuda_runtime.h>
#endif

namespace tachyon::cuda {

inline constexpr bool kFlashProbe = TACHYON_FLASH_PROBE != 0;
inline constexpr int kProbeWords = 32;
enum ProbePhase : int {
  kPhWaitK,
  kPhWaitV,
  kPhTurn,
  kPhSReady,
  kPhPvDone,
  kPhSoftmax,
  kPhRest,
  kPhCount
};
inline constexpr int kProbeConsumer = 12;                           // + kPhCount x warpgroup
inline constexpr int kProbeLoader = kProbeConsumer + 2 * kPhCount;  // + 2 x half
static_assert(kProbeLoader + 4 <= kProbeWords);

// One thread's phase clock: lap(p) adds the cycles since the previous lap to phase p.
template <int N>
struct ProbeLaps {
  uint32_t last = 0;
  uint32_t acc[N] = {};
  __device__ __forceinline__ void begin() {
    if constexpr (kFlashProbe) last = static_cast<uint32_t>(clock());
  }
  __device__ __forceinline__ void lap(int p) {
    if constexpr (kFlashProbe) {
      const uint32_t c = static_cast<uint32_t>(clock());
      acc[p] += c - last;
      last = c;
    }
  }
  __device__ __forceinline__ void store(uint32_t* dst) const {
    if constexpr (kFlashProbe)
      if (dst != nullptr)
        for (int i = 0; i < N; ++i) dst[i] = acc[i];
  }
};

__device__ __forceinline__ uint64_t probe_globaltimer() {
  uint64_t g = 0;
  if constexpr (kFlashProbe) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  return g;
}

__device__ __forceinline__ uint32_t probe_smid() {
  uint32_t s = 0;
  if constexpr (kFlashProbe) asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

#if TACHYON_FLASH_PROBE
// The record buffer for a launch of `blocks` blocks on `stream`, or null (no
// TACHYON_FLASH_PROBE in the environment, or the stream is being captured). Writes the
// previous launch's records first (attention_flash_wgmma.cu).
uint32_t* flash_probe_buffer(int64_t blocks, cudaStream_t stream);
#else
inline uint32_t* flash_probe_buffer(int64_t, void*) {
  return nullptr;
}
#endif

}  // namespace tachyon::cuda
