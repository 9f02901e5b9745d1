// Matrix products for the CPU backend. Weights are f32, f16 or bf16, either as the
// checkpoint stores them ([out_features, in_features], as a Hugging Face Linear does,
// read in place and converted on the fly in registers or in small cache-resident
// panels) or packed once into the kernels' own layout (pack_weight below: converted in
// registers, no per-call pass; the CPU backend packs the decoder's weights at load on
// the AVX-512 path).
//
// Accumulation is f32 throughout (the result matches an f32 reference to rounding).
// The instruction set is chosen at run time: AVX-512 (F/BW/VL/DQ), AVX2+FMA+F16C, or
// portable C++; TACHYON_CPU_ISA=portable|avx2|avx512 caps the choice.
//
// Checkpoint layout: up to 16 rows of x (8 on AVX2) the weights are streamed once and
// converted in registers (decode); beyond, a blocked GEMM converts cache-sized weight
// panels (prefill). Packed layout: one blocked product for every m.
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
  const void* w = nullptr;  // [n, k] row-major, dtype `dtype` (or packed, below)
  DType dtype = DType::kF32;
  int64_t n = 0;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [m, n] with row stride ldy
  int64_t ldy = 0;
  bool packed = false;  // w is in the packed layout of pack_weight()
};

// ---- Packed weights ------------------------------------------------------------------
// A weight matrix copied once (at load) into the layout the kernels read directly: the
// n rows of w (output columns) in panels of kPanel, each panel holding its rows' k values
// interleaved so that one k step of a panel is one contiguous 64-byte (16-bit dtypes)
// or 128-byte (f32) load:
//   f32, f16: panel [k][kPanel]                    element (j, p) at p * kPanel + j % kPanel
//   bf16:     panel [k/2][kPanel][2] (k rounded up to even: pairs of consecutive k)
// Rows past n in the last panel and the padding k are zeros. bf16 pairs split into two
// f32 vectors with one shift and one mask; the blocked GEMM then converts nothing per
// call, and small m (decode) streams one contiguous panel at a time.
inline constexpr int64_t kPanel = 32;
// Elements (of `dtype`) of the packed copy of an [n, k] matrix.
int64_t packed_weight_elems(DType dtype, int64_t n, int64_t k);
// Copies w ([n, k] row-major, f32/f16/bf16) into `out` (packed_weight_elems elements).
void pack_weight(const void* w, DType dtype, int64_t n, int64_t k, void* out,
                 ThreadPool* pool = nullptr);

// Several products sharing one input: for each entry e, e.y = x · e.wᵀ (+ e.bias).
// Same result as one gemm_xwt per entry, but a single fork-join over all of them
// (q/k/v, or gate/up, at decode time: fewer synchronisations, better balance).
// Entries may be packed (GemmWeight::packed) or not.
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
