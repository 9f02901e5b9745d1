// AVX-512 kernels of the quantized product (backend/cpu/qgemm.h): a panel's 16 rows are
// one vector per k step. int4 values become floats through a 16-entry table
// (vpermps reads only the low 4 bits of each lane, so no mask is needed), int8 values
// are sign- or zero-extended and converted, fp8 values are rewritten as f16 bits and
// converted. Activations stay f32 (no VNNI: that would quantize them).
#if defined(__x86_64__)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/avx512_math.h"
#include "backend/cpu/qgemm.h"

namespace tachyon::cpu::detail {
namespace {

constexpr int kMaxM = 8;

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

// The int4 table: value v minus the common zero (none when zeros are stored per row).
TACHYON_AVX512_INLINE __m512 int4_table(const QPackedWeight& w) {
  const float z = static_cast<float>(w.zeros ? 0 : w.zero);
  return _mm512_sub_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                       _mm512_set1_ps(z));
}

// One step of 8-bit values (int8 or fp8) at v as floats (q - zero, or fp8 times 2^-8).
template <V K>
TACHYON_AVX512_INLINE __m512 load8(const uint8_t* v, __m512 zf) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v));
  if constexpr (K == V::kInt8Signed) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  } else if constexpr (K == V::kInt8Zeros) {
    return _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)), zf);
  } else {
    // e4m3 -> f16 bits: sign to bit 15, exponent and mantissa to bits 7..13 (the
    // exponent bias differs by 8: the value times 2^-8, subnormals included).
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
    const __m256i f = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(-16385));
    return _mm512_cvtph_ps(f);
  }
}

// The two steps of a byte of int4 values at v.
template <V K>
TACHYON_AVX512_INLINE void load4(const uint8_t* v, __m512 table, __m512 zf, __m512& lo,
                                 __m512& hi) {
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)));
  lo = _mm512_permutexvar_ps(q, table);
  hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
  if constexpr (K == V::kInt4Zeros) {
    lo = _mm512_sub_ps(lo, zf);
    hi = _mm512_sub_ps(hi, zf);
  }
}

TACHYON_AVX512_INLINE __m512 group_zeros(const QPackedWeight& w, const uint8_t* base) {
  if (!w.zeros) return _mm512_setzero_ps();
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + kQPanel * 4))));
}

// Independent accumulation chains per row of x: an FMA's latency spans several of
// its issue slots, so one row alone keeps four chains going, two rows two each.
template <int M>
constexpr int kChains = M == 1   ? 4
                        : M == 2 ? 2
                                 : 1;

// Bytes ahead of the loads that the streaming kernel prefetches (past a group or
// panel it reaches into the next, which follows in memory).
constexpr int64_t kAhead = 512;

template <int M, V K>
TACHYON_AVX512 void gemv_panels(const QPackedWeight& w, const float* x, int64_t ldx, int64_t p0,
                                int64_t p1, const float* bias, float* y, int64_t ldy) {
  constexpr int C = kChains<M>;
  const __m512 table = int4_table(w);
  for (int64_t p = p0; p < p1; ++p) {
    __m512 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < w.groups; ++g) {
      const uint8_t* base = w.group_data(p, g);
      const __m512 scale = _mm512_loadu_ps(reinterpret_cast<const float*>(base));
      const __m512 zf = group_zeros(w, base);
      const uint8_t* v = base + w.header_bytes();
      const float* xs = x + g * w.group;
      const int64_t steps = w.group_steps(g);
      __m512 gacc[M][C];
      for (int i = 0; i < M; ++i)
        for (int c = 0; c < C; ++c) gacc[i][c] = _mm512_setzero_ps();
      // Rounds of one cache line of values (4 rows of 16 bytes), prefetching the line
      // kAhead bytes on; step s of a round into chain s % C.
      int64_t t = 0;
      if constexpr (K == V::kInt4 || K == V::kInt4Zeros) {
        for (; t + 8 <= steps; t += 8) {
          const uint8_t* vt = v + (t / 2) * kQPanel;
          _mm_prefetch(reinterpret_cast<const char*>(vt + kAhead), _MM_HINT_T0);
#pragma GCC unroll 4
          for (int r = 0; r < 4; ++r) {
            __m512 lo, hi;
            load4<K>(vt + r * kQPanel, table, zf, lo, hi);
#pragma GCC unroll 8
            for (int i = 0; i < M; ++i) {
              const float* xi = xs + i * ldx + t + 2 * r;
              gacc[i][(2 * r) % C] =
                  _mm512_fmadd_ps(lo, _mm512_set1_ps(xi[0]), gacc[i][(2 * r) % C]);
              gacc[i][(2 * r + 1) % C] =
                  _mm512_fmadd_ps(hi, _mm512_set1_ps(xi[1]), gacc[i][(2 * r + 1) % C]);
            }
          }
        }
        for (; t < steps; t += 2) {
          __m512 lo, hi;
          load4<K>(v + (t / 2) * kQPanel, table, zf, lo, hi);
          for (int i = 0; i < M; ++i) {
            gacc[i][0] = _mm512_fmadd_ps(lo, _mm512_set1_ps(xs[i * ldx + t]), gacc[i][0]);
            gacc[i][C - 1] =
                _mm512_fmadd_ps(hi, _mm512_set1_ps(xs[i * ldx + t + 1]), gacc[i][C - 1]);
          }
        }
      } else {
        for (; t + 4 <= steps; t += 4) {
          const uint8_t* vt = v + t * kQPanel;
          _mm_prefetch(reinterpret_cast<const char*>(vt + kAhead), _MM_HINT_T0);
#pragma GCC unroll 4
          for (int r = 0; r < 4; ++r) {
            const __m512 wv = load8<K>(vt + r * kQPanel, zf);
#pragma GCC unroll 8
            for (int i = 0; i < M; ++i)
              gacc[i][r % C] =
                  _mm512_fmadd_ps(wv, _mm512_set1_ps(xs[i * ldx + t + r]), gacc[i][r % C]);
          }
        }
        for (; t < steps; ++t) {
          const __m512 wv = load8<K>(v + t * kQPanel, zf);
          for (int i = 0; i < M; ++i)
            gacc[i][0] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xs[i * ldx + t]), gacc[i][0]);
        }
      }
      for (int i = 0; i < M; ++i) {
        __m512 sum = gacc[i][0];
        for (int c = 1; c < C; ++c) sum = _mm512_add_ps(sum, gacc[i][c]);
        acc[i] = _mm512_fmadd_ps(sum, scale, acc[i]);
      }
    }
    const int64_t rows = std::min(kQPanel, w.n - p * kQPanel);
    const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
    const __m512 b =
        bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + p * kQPanel) : _mm512_setzero_ps();
    for (int i = 0; i < M; ++i)
      _mm512_mask_storeu_ps(y + i * ldy + p * kQPanel, mask, _mm512_add_ps(acc[i], b));
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
  static constexpr Fn fns[kMaxM] = {gemv_m<1>, gemv_m<2>, gemv_m<3>, gemv_m<4>,
                                    gemv_m<5>, gemv_m<6>, gemv_m<7>, gemv_m<8>};
  fns[m - 1](w, x, ldx, p0, p1, bias, y, ldy);
}

template <V K>
TACHYON_AVX512 void dequant_v(const QPackedWeight& w, int64_t p, int64_t s0, int64_t steps,
                              float* out, int64_t ldo) {
  const __m512 table = int4_table(w);
  const int64_t s1 = s0 + steps;
  for (int64_t s = s0; s < s1;) {
    const int64_t g = s / w.group, gs = g * w.group, ge = std::min(s1, gs + w.group_steps(g));
    const uint8_t* base = w.group_data(p, g);
    const __m512 scale = _mm512_loadu_ps(reinterpret_cast<const float*>(base));
    const __m512 zf = group_zeros(w, base);
    const uint8_t* v = base + w.header_bytes();
    if constexpr (K == V::kInt4 || K == V::kInt4Zeros) {
      // Groups and s0 are even (int4 groups of odd length are stored as 8-bit values).
      for (; s < ge; s += 2) {
        __m512 lo, hi;
        load4<K>(v + ((s - gs) / 2) * kQPanel, table, zf, lo, hi);
        _mm512_storeu_ps(out + (s - s0) * ldo, _mm512_mul_ps(lo, scale));
        if (s + 1 < ge) _mm512_storeu_ps(out + (s + 1 - s0) * ldo, _mm512_mul_ps(hi, scale));
      }
    } else {
      for (; s < ge; ++s)
        _mm512_storeu_ps(out + (s - s0) * ldo,
                         _mm512_mul_ps(load8<K>(v + (s - gs) * kQPanel, zf), scale));
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

const QKernels& avx512_qkernels() {
  static const QKernels k{kMaxM, gemv, dequant};
  return k;
}

}  // namespace tachyon::cpu::detail

#endif  // __x86_64__
