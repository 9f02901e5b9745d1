// Inline AVX-512 math for the CPU kernels: the same approximations as avx2_math.h, 16
// lanes at a time. Only for x86-64; callers must check the AVX-512 path is active.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

// The AVX-512 files' target attributes, once: functions compiled for the path, and the
// always-inlined helpers they call (a helper's target must be within its caller's).
#define TACHYON_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define TACHYON_AVX512_INLINE TACHYON_AVX512 inline __attribute__((always_inline))

namespace tachyon::cpu {

// exp(x) for x in [-87, 88] (below: e^-87), as exp256: x = k ln2 + r, |r| <= ln2 / 2,
// e^r by a degree-6 polynomial (relative error ~2e-7), 2^k through the exponent bits.
TACHYON_AVX512_INLINE __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)), _mm512_set1_ps(88.f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.f / 720.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// tanh(y) = sign(y) (1 - 2 / (e^{2|y|} + 1)), as tanh256.
TACHYON_AVX512_INLINE __m512 tanh512(__m512 y) {
  const __m512 sign = _mm512_and_ps(y, _mm512_set1_ps(-0.f));
  const __m512 ay = _mm512_andnot_ps(_mm512_set1_ps(-0.f), y);
  const __m512 e = exp512(_mm512_mul_ps(ay, _mm512_set1_ps(2.f)));
  const __m512 t =
      _mm512_sub_ps(_mm512_set1_ps(1.f),
                    _mm512_div_ps(_mm512_set1_ps(2.f), _mm512_add_ps(e, _mm512_set1_ps(1.f))));
  return _mm512_or_ps(t, sign);
}

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

}  // namespace tachyon::cpu

#endif
