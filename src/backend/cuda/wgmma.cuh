// Hopper warpgroup matrix instructions (sm_90a only: every definition below exists only
// in the sm_90a device pass, and kernels that use them guard their bodies the same way).
//
// wgmma.mma_async: a warpgroup (4 consecutive warps, the first one's index a multiple
// of 4) computes D (64 x N, f32 in registers) += A (64 x 16) B (16 x N). B is read by
// the tensor cores from shared memory through a 64-bit descriptor, A from registers
// (wgmma_rs) or from shared memory too (wgmma_ss256). Accumulator layout, warp w of
// the warpgroup, lane l (g = l / 4, t = l % 4): d[4j + 0, 1] = row 16w + g, columns
// 8j + 2t, 8j + 2t + 1; d[4j + 2, 3] = row 16w + g + 8, the same columns: per warp the
// layout of mma.sync m16n8, repeated over N / 8 column tiles. A register fragments
// use mma.sync m16n8k16's A layout for the warp's 16 rows.
//
// Shared-memory operands here use the 128-byte swizzle: a tile is stored as panels of
// 64 16-bit columns (128-byte rows), each panel rows x 128 bytes, 1024-byte aligned;
// within each group of 8 rows (1024 bytes) the 16-byte chunk c of row r sits at chunk
// c ^ (r % 8) (swz128). K-major operands (rows of M or N, 16 contiguous k) step k by
// adding 32 bytes to the start address inside a panel; the transposed B (rows of k,
// N contiguous) spans panels with the leading-byte offset.
//
// Below them: mbarriers, TMA (tensor-memory-access) loads and stores of 2-d boxes,
// stmatrix, named barriers, cp.async arrivals on mbarriers and setmaxnreg, for
// warp-specialised kernels (gemm_wgmma.cu, attention_flash_wgmma.cu).
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cuda/device_util.cuh"

namespace tachyon::cuda {

// Byte offset of 16-bit element (row r, column c < 64) in a 128-byte-swizzled panel.
__device__ __forceinline__ uint32_t swz128(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Descriptor of a 128-byte-swizzled operand at shared address addr: lbo, the byte
// stride between panels along N (transposed B only); sbo, between 8-row groups.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3ffff) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3ffff) >> 4) << 32) | (uint64_t{1} << 62);
}

// Before the first wgmma of a batch, and after registers it reads were written.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Until at most kPending of this warpgroup's committed batches are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Generic-proxy writes (ordinary stores, cp.async) that the tensor cores read next.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Pins registers an in-flight wgmma reads or writes: the compiler may neither move
// their uses across this point nor reuse them before it.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Operands of the register-A form, N = 64 and 128: the accumulators (%0 on), A (4
// registers), B's descriptor, scale_d (a predicate's source) and trans_b (immediate).
#define TACHYON_WGMMA_ACC8(d, i)                                                              \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define TACHYON_WGMMA_ACC32(d, i)                                                        \
  TACHYON_WGMMA_ACC8(d, i), TACHYON_WGMMA_ACC8(d, i + 8), TACHYON_WGMMA_ACC8(d, i + 16), \
      TACHYON_WGMMA_ACC8(d, i + 24)
#define TACHYON_WGMMA_IN \
  "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(kTransB)
#define TACHYON_WGMMA_N64(TYPE)                                                                    \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                     \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                      \
  " "                                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "    \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, " \
  "1, %38;\n}\n"
#define TACHYON_WGMMA_N128(TYPE)                                                                \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                  \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                  \
  " "                                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"

// D (64 x N) = A B (scale_d == 0) or D + A B, A from registers; B K-major (kTransB 0)
// or transposed (1: rows of k, N contiguous).
template <int N, typename T, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                         int scale_d) {
  static_assert(N == 64 || N == 128, "the shapes the kernels use");
  constexpr bool kBf16 = std::is_same_v<T, bf16_t>;
  if constexpr (N == 64 && kBf16)
    asm volatile(TACHYON_WGMMA_N64("bf16") : TACHYON_WGMMA_ACC32(d, 0) : TACHYON_WGMMA_IN);
  else if constexpr (N == 64)
    asm volatile(TACHYON_WGMMA_N64("f16") : TACHYON_WGMMA_ACC32(d, 0) : TACHYON_WGMMA_IN);
  else if constexpr (kBf16)
    asm volatile(TACHYON_WGMMA_N128("bf16")
                 : TACHYON_WGMMA_ACC32(d, 0), TACHYON_WGMMA_ACC32(d, 32)
                 : TACHYON_WGMMA_IN);
  else
    asm volatile(TACHYON_WGMMA_N128("f16")
                 : TACHYON_WGMMA_ACC32(d, 0), TACHYON_WGMMA_ACC32(d, 32)
                 : TACHYON_WGMMA_IN);
}

// D (64 x 256) = A B (scale_d == 0) or D + A B, A and B both K-major in shared memory
// (descriptors): the main-loop step of the GEMM (gemm_wgmma.cu).
#define TACHYON_WGMMA_SS_N256(TYPE)                                                            \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                                 \
  " {"                                                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
  "%38, %39, "                                                                                 \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, " \
  "%58, %59, "                                                                                 \
  "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
  "%78, %79, "                                                                                 \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, " \
  "%98, %99, "                                                                                 \
  "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, " \
  "%115, %116, %117, %118, %119, "                                                             \
  "%120, %121, %122, %123, %124, %125, %126, %127"                                             \
  "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
#define TACHYON_WGMMA_ACC128(d)                                                      \
  TACHYON_WGMMA_ACC32(d, 0), TACHYON_WGMMA_ACC32(d, 32), TACHYON_WGMMA_ACC32(d, 64), \
      TACHYON_WGMMA_ACC32(d, 96)
template <typename T>
__device__ __forceinline__ void wgmma_ss256(float (&d)[128], uint64_t a, uint64_t b, int scale_d) {
  if constexpr (std::is_same_v<T, bf16_t>)
    asm volatile(TACHYON_WGMMA_SS_N256("bf16")
                 : TACHYON_WGMMA_ACC128(d)
                 : "l"(a), "l"(b), "r"(scale_d));
  else
    asm volatile(TACHYON_WGMMA_SS_N256("f16")
                 : TACHYON_WGMMA_ACC128(d)
                 : "l"(a), "l"(b), "r"(scale_d));
}
#undef TACHYON_WGMMA_SS_N256
#undef TACHYON_WGMMA_ACC128

// ---- mbarriers and tensor-memory-access (TMA) copies ---------------------------------
// A shared-memory mbarrier (64-bit, 8-byte aligned) counts arrivals and, for TMA
// copies, transaction bytes; a phase completes when both reach zero, and waiters name
// the phase's parity (0, 1, 0, ...). A fresh barrier's phase "before 0" counts as
// complete, so waiting for parity 1 on it returns at once.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy and the cluster.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// One arrival that also expects `bytes` more transaction bytes this phase.
__device__ __forceinline__ void mbar_arrive_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// A 2-d box of the tensor `map` (a __grid_constant__ kernel parameter) at element
// (x, y) (x innermost) to shared address dst, its bytes counted on bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int x, int y,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Shared to global: a 2-d box of `map` at (x, y) from shared address src (clipped at the
// tensor's edges), in this thread's bulk group.
__device__ __forceinline__ void tma_store_2d(const void* map, uint32_t src, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(x), "r"(y), "r"(src)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until this thread's bulk groups have read their shared memory (kRead) or completed.
template <bool kRead>
__device__ __forceinline__ void bulk_wait_all() {
  if constexpr (kRead)
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  else
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Four 8 x 8 matrices of 16-bit pairs (the accumulator fragment layout: lane l holds row
// l / 4, columns 2 (l % 4) and + 1 of each) to shared memory; lane l gives the address of
// row l % 8 of matrix l / 8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
// Barrier `id` (1..15; 0 is __syncthreads) over `count` threads (whole warps).
__device__ __forceinline__ void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Arrives at barrier `id` without waiting (counted among its `count` threads).
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// One arrival on bar once every cp.async this thread issued before it has landed (the
// barrier's expected count includes it).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Hands registers back to (dec) or takes them from (inc) the block's pool, per warpgroup.
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

#undef TACHYON_WGMMA_ACC8
#undef TACHYON_WGMMA_ACC32
#undef TACHYON_WGMMA_IN
#undef TACHYON_WGMMA_N64
#undef TACHYON_WGMMA_N128

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace tachyon::cuda
