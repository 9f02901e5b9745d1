// Matrix products for the CPU backend. Weights stay in their checkpoint dtype
// (f32, f16, bf16) and layout ([out_features, in_features], as a Hugging Face Linear
// stores them) and are converted to f32 on the fly inside the kernel, in registers or
// in small cache-resident panels; they are never expanded or copied as a whole.
//
// Accumulation is f32 throughout (the result matches an f32 reference to rounding).
// The instruction set is chosen at run time: AVX-512 (F/BW/VL/DQ), AVX2+FMA+F16C, or
// portable C++; TACHYON_CPU_ISA=portable|avx2|avx512 caps the choice.
//
// Up to 16 rows of x (8 on AVX2) the weights are streamed once and converted in
// registers (decode); beyond, a blocked GEMM converts cache-sized weight panels (prefill).
// Scratch, reused across calls: each thread of the pool keeps one converted panel
// (<= 512 KiB) and the calling thread a packed copy of up to ~512 rows of x.
// Calls from several threads at once are safe; a call from inside a pool job runs on
// that thread alone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/dtype.h"

namespace tachyon {

class ThreadPool;

namespace cpu {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]), f32 activations and output.
// ldx / ldy are the row strides of x and y in elements (>= k and >= n).
// `bias` may be null. Work is split over `pool` (the global pool when null).
// y must not overlap x or w.
void gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
              int64_t n, const float* bias, float* y, int64_t ldy, ThreadPool* pool = nullptr);

// One weight matrix of a fused product (see gemm_xwt_multi).
struct GemmWeight {
  const void* w = nullptr;  // [n, k] row-major, dtype `dtype`
  DType dtype = DType::kF32;
  int64_t n = 0;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [m, n] with row stride ldy
  int64_t ldy = 0;
};

// Several products sharing one input: for each entry e, e.y = x · e.wᵀ (+ e.bias).
// Same result as one gemm_xwt per entry, but a single fork-join over all of them
// (q/k/v, or gate/up, at decode time: fewer synchronisations, better balance).
void gemm_xwt_multi(const float* x, int64_t m, int64_t k, int64_t ldx,
                    std::span<const GemmWeight> weights, ThreadPool* pool = nullptr);

// Instruction-set paths, in increasing order of capability.
enum class CpuIsa : uint8_t { kPortable, kAvx2, kAvx512 };

std::string_view cpu_isa_name(CpuIsa isa);                   // "portable", "avx2", "avx512"
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);  // the names above
// Whether this CPU (and OS) can run the path.
bool cpu_isa_supported(CpuIsa isa);
// The path gemm_xwt uses: the best supported one, capped by TACHYON_CPU_ISA (read once;
// an unknown or unsupported value is reported in the log and capped to what runs).
CpuIsa active_cpu_isa();

// gemm_xwt / gemm_xwt_multi on a given path (tests and benchmarks).
// Throws InvalidArgument when the CPU cannot run `isa`.
void gemm_xwt_isa(CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx, const void* w,
                  DType w_dtype, int64_t n, const float* bias, float* y, int64_t ldy,
                  ThreadPool* pool = nullptr);
void gemm_xwt_multi_isa(CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx,
                        std::span<const GemmWeight> weights, ThreadPool* pool = nullptr);

}  // namespace cpu
}  // namespace tachyon
