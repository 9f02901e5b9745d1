// AVX2 + FMA + F16C kernels. Every function that uses the instructions carries the
// target attribute; the file itself is compiled for the baseline.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"

#define TACHYON_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TACHYON_AVX2_INLINE TACHYON_AVX2 inline __attribute__((always_inline))

namespace tachyon::cpu::detail {
namespace {

constexpr int kMr = 6;
constexpr int kNr = 16;
constexpr int kKc = 512;  // panel of 128 rows x kc: 256 KiB, for the smaller L2 of AVX2-only parts
constexpr int kGemvMaxM = 8;              // larger m goes to the blocked GEMM (measured crossover)
constexpr int64_t kPrefetchAhead = 1024;  // bytes ahead of the loads, per weight row

template <DType D>
using Elem = std::conditional_t<D == DType::kF32, float, uint16_t>;

template <DType D>
TACHYON_AVX2_INLINE __m256 load8(const Elem<D>* p) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (D == DType::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

template <DType D>
inline float load1(const Elem<D>* p) {
  if constexpr (D == DType::kF32) {
    return *p;
  } else if constexpr (D == DType::kBF16) {
    return bf16_to_f32(bf16{*p});
  } else {
    return f16_to_f32(f16{*p});
  }
}

TACHYON_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---- GEMV: M rows of x against R weight rows at a time, converted in registers.

template <DType D, int M, int R>
TACHYON_AVX2_INLINE void gemv_tile(const float* x, int64_t ldx, int64_t k, const Elem<D>* w,
                                   int64_t j, const float* bias, float* y, int64_t ldy) {
  __m256 acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
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
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      __m256 wv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) wv[r] = load8<D>(rows[r] + p + 8 * h);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        const __m256 xv = _mm256_loadu_ps(x + i * ldx + p + 8 * h);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
      }
    }
  }
  for (; p + 8 <= k; p += 8) {
    __m256 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = load8<D>(rows[r] + p);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + p);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) {
      float s = hsum(acc[i][r]);
      for (int64_t q = p; q < k; ++q) s += x[i * ldx + q] * load1<D>(rows[r] + q);
      y[i * ldy + j + r] = s + (bias != nullptr ? bias[j + r] : 0.f);
    }
  }
}

// Rows from j in tiles of R weight rows, each read from memory once and reused from L1
// by every chunk of up to 4 rows of x; advances j past the tiles done.
template <DType D, int R>
TACHYON_AVX2 void gemv_tiles(const float* x, int64_t m, int64_t k, int64_t ldx, const Elem<D>* w,
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
          if constexpr (2 * R <= 8) gemv_tile<D, 2, R>(xi, ldx, k, w, j, bias, yi, ldy);
          break;
        case 3:
          if constexpr (3 * R <= 8) gemv_tile<D, 3, R>(xi, ldx, k, w, j, bias, yi, ldy);
          break;
        default:
          if constexpr (4 * R <= 8) gemv_tile<D, 4, R>(xi, ldx, k, w, j, bias, yi, ldy);
          break;
      }
    }
  }
}

// More weight rows in flight keep more memory requests outstanding; the accumulators
// (m x rows ymm registers) bound how many: 8 rows for m = 1, 4 for m = 2, else 2.
template <DType D>
TACHYON_AVX2 void gemv_dtype(const float* x, int64_t m, int64_t k, int64_t ldx, const void* wv,
                             int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy) {
  const auto* w = static_cast<const Elem<D>*>(wv);
  int64_t j = j0;
  if (m == 1) gemv_tiles<D, 8>(x, m, k, ldx, w, j, j1, bias, y, ldy);
  if (m <= 2) gemv_tiles<D, 4>(x, m, k, ldx, w, j, j1, bias, y, ldy);
  gemv_tiles<D, 2>(x, m, k, ldx, w, j, j1, bias, y, ldy);
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

// ---- Packing: 8 weight rows x 8 columns at a time, converted and transposed.

// In place: r[i] lane l  ->  r[l] lane i.
TACHYON_AVX2_INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + c], 128-bit lane q: rows 4i..4i+3 of column 4q + c.
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

template <DType D>
TACHYON_AVX2 void pack_w_dtype(const void* wv, int64_t k, int64_t j0, int64_t rows, int64_t p0,
                               int64_t kcb, float* out) {
  const auto* w = static_cast<const Elem<D>*>(wv);
  const int64_t full = kcb / 8 * 8;
  for (int h = 0; h < kNr / 8; ++h) {
    const int64_t valid = std::clamp<int64_t>(rows - 8 * h, 0, 8);
    const Elem<D>* base = w + (j0 + 8 * h) * k + p0;
    float* o = out + 8 * h;
    for (int64_t p = 0; p < full; p += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        r[i] = i < valid ? load8<D>(base + i * k + p) : _mm256_setzero_ps();
      transpose8(r);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) _mm256_store_ps(o + (p + q) * kNr, r[q]);
    }
    for (int64_t p = full; p < kcb; ++p) {
      for (int i = 0; i < 8; ++i) o[p * kNr + i] = i < valid ? load1<D>(base + i * k + p) : 0.f;
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

// x rows -> [k][kMr]: 8 columns of up to 8 rows transposed at a time; each store writes
// 8 floats where kMr are due, the excess being overwritten by the next one.
TACHYON_AVX2 void pack_x(const float* x, int64_t ldx, int rows, int64_t k, float* out) {
  static_assert(kMr <= 8);
  const int64_t full = k / 8 * 8;
  for (int64_t p = 0; p < full; p += 8) {
    __m256 r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      r[i] = i < rows ? _mm256_loadu_ps(x + i * ldx + p) : _mm256_setzero_ps();
    }
    transpose8(r);
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p + q) * kMr, r[q]);
  }
  for (int64_t p = full; p < k; ++p) {
    for (int i = 0; i < kMr; ++i) out[p * kMr + i] = i < rows ? x[i * ldx + p] : 0.f;
  }
}

// ---- Microkernel: R x 16 tile of y in 2R ymm accumulators.

template <int R>
TACHYON_AVX2 void micro_rows(const float* xp, const float* panel, int64_t kcb, float* y,
                             int64_t ldy, bool accumulate, const float* bias) {
  __m256 c[R][2];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    c[i][0] = accumulate ? _mm256_loadu_ps(y + i * ldy) : _mm256_setzero_ps();
    c[i][1] = accumulate ? _mm256_loadu_ps(y + i * ldy + 8) : _mm256_setzero_ps();
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kcb; ++p) {
    const __m256 b0 = _mm256_load_ps(panel + p * kNr);
    const __m256 b1 = _mm256_load_ps(panel + p * kNr + 8);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m256 a = _mm256_broadcast_ss(xp + p * kMr + i);
      c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
    }
  }
  if (bias != nullptr) {
    const __m256 b0 = _mm256_loadu_ps(bias), b1 = _mm256_loadu_ps(bias + 8);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      c[i][0] = _mm256_add_ps(c[i][0], b0);
      c[i][1] = _mm256_add_ps(c[i][1], b1);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    _mm256_storeu_ps(y + i * ldy, c[i][0]);
    _mm256_storeu_ps(y + i * ldy + 8, c[i][1]);
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

const GemmKernels& avx2_kernels() {
  static const GemmKernels kernels{kGemvMaxM, gemv,  kMr,     kNr,     kKc,    pack_w,
                                   pack_x,    micro, nullptr, nullptr, nullptr};
  return kernels;
}

}  // namespace tachyon::cpu::detail

#endif  // __x86_64__
