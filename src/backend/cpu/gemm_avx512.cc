// AVX-512 (F/BW/VL/DQ) kernels. Every function that uses the instructions carries the
// target attribute; the file itself is compiled for the baseline.
#if defined(__x86_64__)

// GCC 12 reports its own _mm512_undefined_* helpers (used inside the reduction and
// conversion intrinsics) as maybe-uninitialised; they are undefined by design.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "backend/cpu/avx512_math.h"
#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"

namespace tachyon::cpu::detail {
namespace {

constexpr int kMr = 12;
constexpr int kNr = 32;
constexpr int kKc = 1024;      // panel of 128 rows x kc: 512 KiB, L2-resident (measured best)
constexpr int kGemvMaxM = 16;  // larger m goes to the blocked GEMM (measured crossover)
constexpr int64_t kPrefetchAhead = 1024;  // bytes ahead of the loads, per weight row

template <DType D>
using Elem = std::conditional_t<D == DType::kF32, float, uint16_t>;

// 16 weights from p as f32.
template <DType D>
TACHYON_AVX512_INLINE __m512 load16(const Elem<D>* p) {
  if constexpr (D == DType::kF32) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// The first `count` (< 16) weights from p, zeros after; reads nothing beyond them.
template <DType D>
TACHYON_AVX512_INLINE __m512 load16_partial(const Elem<D>* p, __mmask16 mask) {
  if constexpr (D == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// ---- GEMV: M rows of x against R weight rows at a time, converted in registers.

template <DType D, int M, int R>
TACHYON_AVX512_INLINE void gemv_tile(const float* x, int64_t ldx, int64_t k, const Elem<D>* w,
                                     int64_t j, const float* bias, float* y, int64_t ldy) {
  __m512 acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  const Elem<D>* rows[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) rows[r] = w + (j + r) * k;
  constexpr int64_t kAhead = kPrefetchAhead / sizeof(Elem<D>);
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    // Past the end of its row, each row's prefetch runs on into the same row of the
    // next tile (rows are contiguous), so the stream never restarts cold.
    const int64_t ahead = p + kAhead < k ? kAhead : kAhead + (R - 1) * k;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[r] + p + ahead), _MM_HINT_T0);
      if constexpr (D == DType::kF32) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[r] + p + ahead + 16), _MM_HINT_T0);
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512 wv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) wv[r] = load16<D>(rows[r] + p + 16 * h);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + i * ldx + p + 16 * h);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
      }
    }
  }
  for (; p < k; p += 16) {
    const int64_t left = k - p;
    const __mmask16 mask = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = load16_partial<D>(rows[r] + p, mask);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + p);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      y[i * ldy + j + r] = _mm512_reduce_add_ps(acc[i][r]) + (bias != nullptr ? bias[j + r] : 0.f);
    }
  }
}

// Rows [j0, j1) in tiles of R weight rows (then 4, then 1 for the rest). Each tile is
// read from memory once and reused from L1 by every chunk of up to 4 rows of x.
template <DType D, int R>
TACHYON_AVX512 void gemv_tiles(const float* x, int64_t m, int64_t k, int64_t ldx, const Elem<D>* w,
                               int64_t& j, int64_t j1, const float* bias, float* y, int64_t ldy) {
  for (; j + R <= j1; j += R) {
    for (int64_t i = 0; i < m; i += 4) {
      const float* xi = x + i * ldx;
      float* yi = y + i * ldy;
      switch (std::min<int64_t>(4, m - i)) {
        case 1:
          gemv_tile<D, 1, R>(xi, ldx, k, w, j, bias, yi, ldy);
          break;
        case 2:
          if constexpr (2 * R <= 16) gemv_tile<D, 2, R>(xi, ldx, k, w, j, bias, yi, ldy);
          break;
        case 3:
          if constexpr (3 * R <= 16) gemv_tile<D, 3, R>(xi, ldx, k, w, j, bias, yi, ldy);
          break;
        default:
          if constexpr (4 * R <= 16) gemv_tile<D, 4, R>(xi, ldx, k, w, j, bias, yi, ldy);
          break;
      }
    }
  }
}

// More weight rows in flight keep more memory requests outstanding; the accumulators
// (m x rows zmm registers) bound how many: 16 rows for m = 1, 8 for m = 2, else 4.
template <DType D>
TACHYON_AVX512 void gemv_dtype(const float* x, int64_t m, int64_t k, int64_t ldx, const void* wv,
                               int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy) {
  const auto* w = static_cast<const Elem<D>*>(wv);
  int64_t j = j0;
  if (m == 1) gemv_tiles<D, 16>(x, m, k, ldx, w, j, j1, bias, y, ldy);
  if (m == 2) gemv_tiles<D, 8>(x, m, k, ldx, w, j, j1, bias, y, ldy);
  gemv_tiles<D, 4>(x, m, k, ldx, w, j, j1, bias, y, ldy);
  gemv_tiles<D, 1>(x, m, k, ldx, w, j, j1, bias, y, ldy);
}

void gemv(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType dtype, int64_t j0,
          int64_t j1, const float* bias, float* y, int64_t ldy) {
  switch (dtype) {
    case DType::kF32:
      return gemv_dtype<DType::kF32>(x, m, k, ldx, w, j0, j1, bias, y, ldy);
    case DType::kF16:
      return gemv_dtype<DType::kF16>(x, m, k, ldx, w, j0, j1, bias, y, ldy);
    case DType::kBF16:
      return gemv_dtype<DType::kBF16>(x, m, k, ldx, w, j0, j1, bias, y, ldy);
    default:
      TACHYON_CHECK(false, "gemv dtype {}", dtype_name(dtype));
  }
}

// ---- Packing: 16 weight rows x 16 columns at a time, converted and transposed.

template <DType D>
TACHYON_AVX512 void pack_w_dtype(const void* wv, int64_t k, int64_t j0, int64_t rows, int64_t p0,
                                 int64_t kcb, float* out) {
  const auto* w = static_cast<const Elem<D>*>(wv);
  for (int h = 0; h < kNr / 16; ++h) {
    const int64_t valid = std::clamp<int64_t>(rows - 16 * h, 0, 16);
    const Elem<D>* base = w + (j0 + 16 * h) * k + p0;
    float* o = out + 16 * h;
    for (int64_t p = 0; p < kcb; p += 16) {
      const int64_t left = kcb - p;
      const __mmask16 mask = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        if (i < valid) {
          r[i] =
              left >= 16 ? load16<D>(base + i * k + p) : load16_partial<D>(base + i * k + p, mask);
        } else {
          r[i] = _mm512_setzero_ps();
        }
      }
      transpose16(r);
      const int64_t count = std::min<int64_t>(16, left);
      for (int64_t q = 0; q < count; ++q) _mm512_store_ps(o + (p + q) * kNr, r[q]);
    }
  }
}

void pack_w(const void* w, DType dtype, int64_t k, int64_t j0, int64_t rows, int64_t p0,
            int64_t kcb, float* out) {
  switch (dtype) {
    case DType::kF32:
      return pack_w_dtype<DType::kF32>(w, k, j0, rows, p0, kcb, out);
    case DType::kF16:
      return pack_w_dtype<DType::kF16>(w, k, j0, rows, p0, kcb, out);
    case DType::kBF16:
      return pack_w_dtype<DType::kBF16>(w, k, j0, rows, p0, kcb, out);
    default:
      TACHYON_CHECK(false, "pack dtype {}", dtype_name(dtype));
  }
}

// x rows -> [k][kMr]: 16 columns of up to 16 rows transposed at a time; each store
// writes 16 floats where kMr are due, the excess being overwritten by the next one.
TACHYON_AVX512 void pack_x(const float* x, int64_t ldx, int rows, int64_t k, float* out) {
  static_assert(kMr <= 16);
  for (int64_t p = 0; p < k; p += 16) {
    const int64_t left = k - p;
    const __mmask16 mask = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      r[i] = i < rows ? _mm512_maskz_loadu_ps(mask, x + i * ldx + p) : _mm512_setzero_ps();
    }
    transpose16(r);
    const int64_t count = std::min<int64_t>(16, left);
    for (int64_t q = 0; q < count; ++q) _mm512_storeu_ps(out + (p + q) * kMr, r[q]);
  }
}

// ---- Microkernel: R x 32 tile of y in 2R zmm accumulators.

template <int R>
TACHYON_AVX512 void micro_rows(const float* xp, const float* panel, int64_t kcb, float* y,
                               int64_t ldy, bool accumulate, const float* bias) {
  __m512 c[R][2];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    c[i][0] = accumulate ? _mm512_loadu_ps(y + i * ldy) : _mm512_setzero_ps();
    c[i][1] = accumulate ? _mm512_loadu_ps(y + i * ldy + 16) : _mm512_setzero_ps();
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kcb; ++p) {
    const __m512 b0 = _mm512_load_ps(panel + p * kNr);
    const __m512 b1 = _mm512_load_ps(panel + p * kNr + 16);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 a = _mm512_set1_ps(xp[p * kMr + i]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
  }
  if (bias != nullptr) {
    const __m512 b0 = _mm512_loadu_ps(bias), b1 = _mm512_loadu_ps(bias + 16);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      c[i][0] = _mm512_add_ps(c[i][0], b0);
      c[i][1] = _mm512_add_ps(c[i][1], b1);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    _mm512_storeu_ps(y + i * ldy, c[i][0]);
    _mm512_storeu_ps(y + i * ldy + 16, c[i][1]);
  }
}

template <int... Rs>
void micro_dispatch(int rows, const float* xp, const float* panel, int64_t kcb, float* y,
                    int64_t ldy, bool accumulate, const float* bias,
                    std::integer_sequence<int, Rs...>) {
  using Fn = void (*)(const float*, const float*, int64_t, float*, int64_t, bool, const float*);
  static constexpr Fn kTable[] = {micro_rows<Rs + 1>...};
  kTable[rows - 1](xp, panel, kcb, y, ldy, accumulate, bias);
}

void micro(int rows, const float* xp, const float* panel, int64_t kcb, float* y, int64_t ldy,
           bool accumulate, const float* bias) {
  micro_dispatch(rows, xp, panel, kcb, y, ldy, accumulate, bias,
                 std::make_integer_sequence<int, kMr>{});
}

// ---- Packed weights: an R x 32 tile against one panel, converted in registers.

TACHYON_AVX512_INLINE __mmask16 lanes(int count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << std::max(count, 0)) - 1);
}

// Elements ahead of the loads that few-row products prefetch, per panel (1 KiB in
// 16-bit dtypes); past a panel's end it reaches into the next panel.
constexpr int64_t kPackedAhead = 512;

// Panels of kPanel columns (P of them side by side, so that a few rows still keep
// enough independent accumulators in flight) against R rows of packed x. Every output
// is one accumulation in k order, whatever R and P: the same bits for any batch.
template <DType D, int R, int P>
TACHYON_AVX512 void packed_rows(const float* xp, const void* panel, int64_t stride, int64_t kcb,
                                float* y, int64_t ldy, int last_cols, bool accumulate,
                                const float* bias) {
  static_assert(kNr == kPanel && 2 * R * P <= 24);
  __mmask16 mask[P][2];
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q) {
    const int cols = q == P - 1 ? last_cols : kNr;
    mask[q][0] = lanes(cols);
    mask[q][1] = lanes(cols - 16);
  }
  __m512 c[R][P][2];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      float* yq = y + i * ldy + q * kNr;
      c[i][q][0] = accumulate ? _mm512_maskz_loadu_ps(mask[q][0], yq) : _mm512_setzero_ps();
      c[i][q][1] = accumulate ? _mm512_maskz_loadu_ps(mask[q][1], yq + 16) : _mm512_setzero_ps();
    }
  }
  if constexpr (D == DType::kBF16) {
    // One 64-byte load holds 16 columns at k steps p and p + 1 (low and high halves of
    // each 32-bit lane): a shift and a mask make them two f32 vectors.
    const auto* w = static_cast<const uint16_t*>(panel);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (int64_t p = 0; p < kcb; p += 2) {
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        const uint16_t* wq = w + q * stride + p * kNr;
        if constexpr (R <= 4) {
          // Few rows: the product runs at the speed of the weights' stream (decode).
          _mm_prefetch(reinterpret_cast<const char*>(wq + kPackedAhead), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(wq + kPackedAhead + kNr), _MM_HINT_T0);
        } else if (q == 0) {
          // More rows: while this panel is computed, bring in the one after the group
          // at the same pace (later row tiles of this panel find it in L1 anyway).
          _mm_prefetch(reinterpret_cast<const char*>(wq + P * stride), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(wq + P * stride + kNr), _MM_HINT_T0);
        }
        const __m512i w0 = _mm512_loadu_si512(wq);
        const __m512i w1 = _mm512_loadu_si512(wq + kNr);
        const __m512 a0 = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
        const __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(w0, high));
        const __m512 b0 = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
        const __m512 b1 = _mm512_castsi512_ps(_mm512_and_si512(w1, high));
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          const __m512 x0 = _mm512_set1_ps(xp[p * kMr + i]);
          const __m512 x1 = _mm512_set1_ps(xp[(p + 1) * kMr + i]);
          c[i][q][0] = _mm512_fmadd_ps(x0, a0, c[i][q][0]);
          c[i][q][1] = _mm512_fmadd_ps(x0, b0, c[i][q][1]);
          c[i][q][0] = _mm512_fmadd_ps(x1, a1, c[i][q][0]);
          c[i][q][1] = _mm512_fmadd_ps(x1, b1, c[i][q][1]);
        }
      }
    }
  } else {
    const auto* w = static_cast<const Elem<D>*>(panel);
#pragma GCC unroll 2
    for (int64_t p = 0; p < kcb; ++p) {
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        if constexpr (R <= 4) {
          _mm_prefetch(reinterpret_cast<const char*>(w + q * stride + p * kNr + kPackedAhead),
                       _MM_HINT_T0);
        }
        const __m512 b0 = load16<D>(w + q * stride + p * kNr);
        const __m512 b1 = load16<D>(w + q * stride + p * kNr + 16);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          const __m512 a = _mm512_set1_ps(xp[p * kMr + i]);
          c[i][q][0] = _mm512_fmadd_ps(a, b0, c[i][q][0]);
          c[i][q][1] = _mm512_fmadd_ps(a, b1, c[i][q][1]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q) {
    if (bias != nullptr) {
      const __m512 b0 = _mm512_maskz_loadu_ps(mask[q][0], bias + q * kNr);
      const __m512 b1 = _mm512_maskz_loadu_ps(mask[q][1], bias + q * kNr + 16);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        c[i][q][0] = _mm512_add_ps(c[i][q][0], b0);
        c[i][q][1] = _mm512_add_ps(c[i][q][1], b1);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      float* yq = y + i * ldy + q * kNr;
      _mm512_mask_storeu_ps(yq, mask[q][0], c[i][q][0]);
      _mm512_mask_storeu_ps(yq + 16, mask[q][1], c[i][q][1]);
    }
  }
}

// Panels a call takes for `rows` rows: up to 24 accumulators.
constexpr int panels_for(int rows) {
  return std::max(1, std::min(4, 12 / rows));
}

using PackedFn = void (*)(const float*, const void*, int64_t, int64_t, float*, int64_t, int, bool,
                          const float*);

// [rows - 1][panels - 1] for rows <= kMr, panels <= panels_for(rows) (null beyond).
template <DType D, int... Rs>
constexpr std::array<std::array<PackedFn, 4>, sizeof...(Rs)> packed_table(
    std::integer_sequence<int, Rs...>) {
  auto row = []<int R>(std::integral_constant<int, R>) {
    std::array<PackedFn, 4> r{};
    r[0] = packed_rows<D, R, 1>;
    if constexpr (panels_for(R) >= 2) r[1] = packed_rows<D, R, 2>;
    if constexpr (panels_for(R) >= 3) r[2] = packed_rows<D, R, 3>;
    if constexpr (panels_for(R) >= 4) r[3] = packed_rows<D, R, 4>;
    return r;
  };
  return {row(std::integral_constant<int, Rs + 1>{})...};
}

int packed_panels(int rows) {
  return panels_for(rows);
}

void packed_micro(int rows, const float* xp, const void* panel, int64_t stride, int panels,
                  DType dtype, int64_t kcb, float* y, int64_t ldy, int last_cols, bool accumulate,
                  const float* bias) {
  static constexpr auto kF32 = packed_table<DType::kF32>(std::make_integer_sequence<int, kMr>{});
  static constexpr auto kF16 = packed_table<DType::kF16>(std::make_integer_sequence<int, kMr>{});
  static constexpr auto kBF16 = packed_table<DType::kBF16>(std::make_integer_sequence<int, kMr>{});
  const auto& table = dtype == DType::kBF16 ? kBF16 : dtype == DType::kF16 ? kF16 : kF32;
  table[rows - 1][panels - 1](xp, panel, stride, kcb, y, ldy, last_cols, accumulate, bias);
}

// A packed panel at k steps [0, kcb) as f32 [kcb][kPanel], the layout micro reads.
template <DType D>
TACHYON_AVX512 void unpack_dtype(const void* panel, int64_t kcb, float* out) {
  if constexpr (D == DType::kBF16) {
    const auto* w = static_cast<const uint16_t*>(panel);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (int64_t p = 0; p < kcb; p += 2) {
      const __m512i w0 = _mm512_loadu_si512(w + p * kNr);
      const __m512i w1 = _mm512_loadu_si512(w + p * kNr + kNr);
      _mm512_store_ps(out + p * kNr, _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)));
      _mm512_store_ps(out + p * kNr + 16, _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)));
      if (p + 1 == kcb) break;
      _mm512_store_ps(out + (p + 1) * kNr, _mm512_castsi512_ps(_mm512_and_si512(w0, high)));
      _mm512_store_ps(out + (p + 1) * kNr + 16, _mm512_castsi512_ps(_mm512_and_si512(w1, high)));
    }
  } else {
    const auto* w = static_cast<const Elem<D>*>(panel);
    for (int64_t p = 0; p < kcb * kNr; p += 16) _mm512_store_ps(out + p, load16<D>(w + p));
  }
}

void unpack_panel(const void* panel, DType dtype, int64_t kcb, float* out) {
  switch (dtype) {
    case DType::kF32:
      return unpack_dtype<DType::kF32>(panel, kcb, out);
    case DType::kF16:
      return unpack_dtype<DType::kF16>(panel, kcb, out);
    default:
      return unpack_dtype<DType::kBF16>(panel, kcb, out);
  }
}

}  // namespace

const GemmKernels& avx512_kernels() {
  static const GemmKernels kernels{kGemvMaxM,    gemv,          kMr,         kNr,
                                   kKc,          pack_w,        pack_x,      micro,
                                   packed_micro, packed_panels, unpack_panel};
  return kernels;
}

}  // namespace tachyon::cpu::detail

#endif  // __x86_64__
