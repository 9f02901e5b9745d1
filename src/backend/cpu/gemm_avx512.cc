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
#include <type_traits>
#include <utility>

#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"

#define TACHYON_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define TACHYON_AVX512_INLINE TACHYON_AVX512 inline __attribute__((always_inline))

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

// In place: r[i] lane l  ->  r[l] lane i.
TACHYON_AVX512_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + c], 128-bit lane q: rows 4i..4i+3 of column 4q + c.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xee);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

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

}  // namespace

const GemmKernels& avx512_kernels() {
  static const GemmKernels kernels{kGemvMaxM, gemv, kMr, kNr, kKc, pack_w, pack_x, micro};
  return kernels;
}

}  // namespace tachyon::cpu::detail

#endif  // __x86_64__
