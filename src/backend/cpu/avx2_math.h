// Inline AVX2/FMA math shared by the CPU kernels: horizontal sum, exp, tanh, erf.
// Only for x86-64; callers must check use_avx2() before running these.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace tachyon::cpu {

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// exp(x) for x in [-87, 88]: x = k ln2 + r, |r| <= ln2 / 2, e^r by a degree-6
// polynomial (relative error ~2e-7), 2^k through the exponent bits.
__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
  __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.f / 720.f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// tanh(y) = sign(y) (1 - 2 / (e^{2|y|} + 1)), accurate to a few 1e-7 absolute.
__attribute__((target("avx2,fma"))) inline __m256 tanh256(__m256 y) {
  __m256 sign = _mm256_and_ps(y, _mm256_set1_ps(-0.f));
  __m256 ay = _mm256_andnot_ps(_mm256_set1_ps(-0.f), y);
  __m256 e = exp256(_mm256_mul_ps(ay, _mm256_set1_ps(2.f)));
  __m256 t =
      _mm256_sub_ps(_mm256_set1_ps(1.f),
                    _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, _mm256_set1_ps(1.f))));
  return _mm256_or_ps(t, sign);
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7).
__attribute__((target("avx2,fma"))) inline __m256 erf256(__m256 x) {
  __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.f));
  __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.f), x);
  __m256 t = _mm256_div_ps(_mm256_set1_ps(1.f),
                           _mm256_fmadd_ps(ax, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  __m256 e = exp256(_mm256_mul_ps(_mm256_mul_ps(ax, ax), _mm256_set1_ps(-1.f)));
  __m256 r = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.f));
  return _mm256_or_ps(r, sign);
}

}  // namespace tachyon::cpu

#endif
