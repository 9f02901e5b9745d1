// AVX2 kernels of the quantized product (backend/cpu/qgemm.h): a panel's 16 rows are
// two 8-lane vectors per k step; integers are extended, their zero subtracted and
// converted, fp8 values rewritten as f16 bits and converted. Activations stay f32.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/qgemm.h"

#define TACHYON_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TACHYON_AVX2_INLINE TACHYON_AVX2 inline __attribute__((always_inline))

namespace tachyon::cpu::detail {
namespace {

constexpr int kMaxM = 4;

// Variants of the stored values.
enum class V { kInt4, kInt4Zeros, kInt8Signed, kInt8Zeros, kFp8 };

V variant(const QPackedWeight& w) {
  switch (w.kind) {
    case QKind::kInt4:
      return w.zeros ? V::kInt4Zeros : V::kInt4;
    case QKind::kInt8:
      return w.signed_q ? V::kInt8Signed : V::kInt8Zeros;
    default:
      return V::kFp8;
  }
}

inline __m128i load_8bytes(const uint8_t* v) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v));
}

// Half h (8 rows) of one step of 8-bit values at v as floats (q - zero, fp8 times 2^-8).
template <V K>
TACHYON_AVX2_INLINE __m256 load8(const uint8_t* v, __m256 zf) {
  const __m128i b = load_8bytes(v);
  if constexpr (K == V::kInt8Signed) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  } else if constexpr (K == V::kInt8Zeros) {
    return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), zf);
  } else {
    // e4m3 -> f16 bits (the value times 2^-8, subnormals included).
    const __m128i h = _mm_slli_epi16(_mm_cvtepu8_epi16(b), 8);
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(h, 1), _mm_set1_epi16(-16385)));
  }
}

// The two steps of 8 bytes of int4 values at v (zf: the zeros, or the common zero).
TACHYON_AVX2_INLINE void load4(const uint8_t* v, __m256 zf, __m256& lo, __m256& hi) {
  const __m256i q = _mm256_cvtepu8_epi32(load_8bytes(v));
  lo = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q, _mm256_set1_epi32(15))), zf);
  hi = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4)), zf);
}

// The zeros of a group's rows [8h, 8h + 8) as floats (the common zero when none are
// stored).
TACHYON_AVX2_INLINE __m256 group_zeros(const QPackedWeight& w, const uint8_t* base, int h) {
  if (!w.zeros) return _mm256_set1_ps(static_cast<float>(w.zero));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load_8bytes(base + kQPanel * 4 + 8 * h)));
}

template <int M, V K>
TACHYON_AVX2 void gemv_panels(const QPackedWeight& w, const float* x, int64_t ldx, int64_t p0,
                              int64_t p1, const float* bias, float* y, int64_t ldy) {
  for (int64_t p = p0; p < p1; ++p) {
    __m256 acc[M][2];
    for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < w.groups; ++g) {
      const uint8_t* base = w.group_data(p, g);
      const auto* sp = reinterpret_cast<const float*>(base);
      const __m256 z0 = group_zeros(w, base, 0), z1 = group_zeros(w, base, 1);
      const uint8_t* v = base + w.header_bytes();
      const float* xs = x + g * w.group;
      const int64_t steps = w.group_steps(g);
      // Chains per half: one or two rows of x keep a second chain (the odd steps) so
      // that FMAs do not wait on each other.
      constexpr int C = M <= 2 ? 2 : 1;
      __m256 gacc[M][2][C];
      for (int i = 0; i < M; ++i)
        for (int c = 0; c < C; ++c) gacc[i][0][c] = gacc[i][1][c] = _mm256_setzero_ps();
      if constexpr (K == V::kInt4 || K == V::kInt4Zeros) {
        for (int64_t t = 0; t < steps; t += 2) {
          __m256 lo0, hi0, lo1, hi1;
          load4(v + (t / 2) * kQPanel, z0, lo0, hi0);
          load4(v + (t / 2) * kQPanel + 8, z1, lo1, hi1);
          for (int i = 0; i < M; ++i) {
            const __m256 a = _mm256_set1_ps(xs[i * ldx + t]),
                         b = _mm256_set1_ps(xs[i * ldx + t + 1]);
            gacc[i][0][0] = _mm256_fmadd_ps(lo0, a, gacc[i][0][0]);
            gacc[i][1][0] = _mm256_fmadd_ps(lo1, a, gacc[i][1][0]);
            gacc[i][0][C - 1] = _mm256_fmadd_ps(hi0, b, gacc[i][0][C - 1]);
            gacc[i][1][C - 1] = _mm256_fmadd_ps(hi1, b, gacc[i][1][C - 1]);
          }
        }
      } else {
        int64_t t = 0;
        for (; t + C <= steps; t += C) {
          for (int c = 0; c < C; ++c) {
            const uint8_t* vt = v + (t + c) * kQPanel;
            const __m256 w0 = load8<K>(vt, z0), w1 = load8<K>(vt + 8, z1);
            for (int i = 0; i < M; ++i) {
              const __m256 a = _mm256_set1_ps(xs[i * ldx + t + c]);
              gacc[i][0][c] = _mm256_fmadd_ps(w0, a, gacc[i][0][c]);
              gacc[i][1][c] = _mm256_fmadd_ps(w1, a, gacc[i][1][c]);
            }
          }
        }
        for (; t < steps; ++t) {
          const __m256 w0 = load8<K>(v + t * kQPanel, z0), w1 = load8<K>(v + t * kQPanel + 8, z1);
          for (int i = 0; i < M; ++i) {
            const __m256 a = _mm256_set1_ps(xs[i * ldx + t]);
            gacc[i][0][0] = _mm256_fmadd_ps(w0, a, gacc[i][0][0]);
            gacc[i][1][0] = _mm256_fmadd_ps(w1, a, gacc[i][1][0]);
          }
        }
      }
      if constexpr (C == 2)
        for (int i = 0; i < M; ++i)
          for (int h = 0; h < 2; ++h) gacc[i][h][0] = _mm256_add_ps(gacc[i][h][0], gacc[i][h][1]);
      const __m256 s0 = _mm256_loadu_ps(sp), s1 = _mm256_loadu_ps(sp + 8);
      for (int i = 0; i < M; ++i) {
        acc[i][0] = _mm256_fmadd_ps(gacc[i][0][0], s0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(gacc[i][1][0], s1, acc[i][1]);
      }
    }
    const int64_t rows = std::min(kQPanel, w.n - p * kQPanel);
    for (int i = 0; i < M; ++i) {
      alignas(32) float o[kQPanel];
      _mm256_store_ps(o, acc[i][0]);
      _mm256_store_ps(o + 8, acc[i][1]);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t j = p * kQPanel + r;
        y[i * ldy + j] = o[r] + (bias != nullptr ? bias[j] : 0.f);
      }
    }
  }
}

template <int M>
void gemv_m(const QPackedWeight& w, const float* x, int64_t ldx, int64_t p0, int64_t p1,
            const float* bias, float* y, int64_t ldy) {
  switch (variant(w)) {
    case V::kInt4:
      return gemv_panels<M, V::kInt4>(w, x, ldx, p0, p1, bias, y, ldy);
    case V::kInt4Zeros:
      return gemv_panels<M, V::kInt4Zeros>(w, x, ldx, p0, p1, bias, y, ldy);
    case V::kInt8Signed:
      return gemv_panels<M, V::kInt8Signed>(w, x, ldx, p0, p1, bias, y, ldy);
    case V::kInt8Zeros:
      return gemv_panels<M, V::kInt8Zeros>(w, x, ldx, p0, p1, bias, y, ldy);
    case V::kFp8:
      return gemv_panels<M, V::kFp8>(w, x, ldx, p0, p1, bias, y, ldy);
  }
}

void gemv(const QPackedWeight& w, const float* x, int m, int64_t ldx, int64_t p0, int64_t p1,
          const float* bias, float* y, int64_t ldy) {
  using Fn = void (*)(const QPackedWeight&, const float*, int64_t, int64_t, int64_t, const float*,
                      float*, int64_t);
  static constexpr Fn fns[kMaxM] = {gemv_m<1>, gemv_m<2>, gemv_m<3>, gemv_m<4>};
  fns[m - 1](w, x, ldx, p0, p1, bias, y, ldy);
}

template <V K>
TACHYON_AVX2 void dequant_v(const QPackedWeight& w, int64_t p, int64_t s0, int64_t steps,
                            float* out, int64_t ldo) {
  const int64_t s1 = s0 + steps;
  for (int64_t s = s0; s < s1;) {
    const int64_t g = s / w.group, gs = g * w.group, ge = std::min(s1, gs + w.group_steps(g));
    const uint8_t* base = w.group_data(p, g);
    const auto* sp = reinterpret_cast<const float*>(base);
    const __m256 sc[2] = {_mm256_loadu_ps(sp), _mm256_loadu_ps(sp + 8)};
    const __m256 zf[2] = {group_zeros(w, base, 0), group_zeros(w, base, 1)};
    const uint8_t* v = base + w.header_bytes();
    if constexpr (K == V::kInt4 || K == V::kInt4Zeros) {
      // Groups and s0 are even (int4 groups of odd length are stored as 8-bit values).
      for (; s < ge; s += 2) {
        for (int h = 0; h < 2; ++h) {
          __m256 lo, hi;
          load4(v + ((s - gs) / 2) * kQPanel + 8 * h, zf[h], lo, hi);
          _mm256_storeu_ps(out + (s - s0) * ldo + 8 * h, _mm256_mul_ps(lo, sc[h]));
          if (s + 1 < ge)
            _mm256_storeu_ps(out + (s + 1 - s0) * ldo + 8 * h, _mm256_mul_ps(hi, sc[h]));
        }
      }
    } else {
      for (; s < ge; ++s)
        for (int h = 0; h < 2; ++h)
          _mm256_storeu_ps(out + (s - s0) * ldo + 8 * h,
                           _mm256_mul_ps(load8<K>(v + (s - gs) * kQPanel + 8 * h, zf[h]), sc[h]));
    }
  }
}

void dequant(const QPackedWeight& w, int64_t p, int64_t s0, int64_t steps, float* out,
             int64_t ldo) {
  switch (variant(w)) {
    case V::kInt4:
      return dequant_v<V::kInt4>(w, p, s0, steps, out, ldo);
    case V::kInt4Zeros:
      return dequant_v<V::kInt4Zeros>(w, p, s0, steps, out, ldo);
    case V::kInt8Signed:
      return dequant_v<V::kInt8Signed>(w, p, s0, steps, out, ldo);
    case V::kInt8Zeros:
      return dequant_v<V::kInt8Zeros>(w, p, s0, steps, out, ldo);
    case V::kFp8:
      return dequant_v<V::kFp8>(w, p, s0, steps, out, ldo);
  }
}

}  // namespace

const QKernels& avx2_qkernels() {
  static const QKernels k{kMaxM, gemv, dequant};
  return k;
}

}  // namespace tachyon::cpu::detail

#endif  // __x86_64__
