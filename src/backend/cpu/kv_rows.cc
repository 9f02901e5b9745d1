// The int8 KV row quantizer (kv_rows.h): a portable path and an AVX2 one that gives
// the same bytes (IEEE division, round to nearest even, the same NaN handling).
#include "backend/cpu/kv_rows.h"

#include "backend/cpu/vec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tachyon::cpu {

void quantize_int8_row_portable(const float* x, int64_t hd, int8_t* dst) {
  float mx = 0.f;
  for (int64_t i = 0; i < hd; ++i) mx = std::max(mx, std::fabs(x[i]));
  const float scale = mx / 127.f;
  for (int64_t i = 0; i < hd; ++i) {
    const float q = scale > 0.f ? std::nearbyint(x[i] / scale) : 0.f;
    dst[i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, q)));
  }
  std::memcpy(dst + hd, &scale, sizeof scale);
}

#if defined(__x86_64__)

namespace {

__attribute__((target("avx2,fma"))) void quantize_int8_row_avx2(const float* x, int64_t hd,
                                                                int8_t* dst) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // max_ps(a, b) is b when a is NaN: a NaN element is skipped, as std::max(mx, NaN).
  __m256 m = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; d += 8)
    m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + d), abs_mask), m);
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float scale = _mm_cvtss_f32(m4) / 127.f;
  if (scale > 0.f) {
    const __m256 s = _mm256_set1_ps(scale);
    const __m256 lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
    for (int64_t d = 0; d < hd; d += 8) {
      __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + d), s),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm256_min_ps(hi, _mm256_max_ps(q, lo));  // NaN: -127, as the portable path
      const __m256i i = _mm256_cvtps_epi32(q);
      const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + d), _mm_packs_epi16(w, w));
    }
  } else {
    std::memset(dst, 0, static_cast<size_t>(hd));
  }
  std::memcpy(dst + hd, &scale, sizeof scale);
}

}  // namespace

#endif

void quantize_int8_row(const float* x, int64_t hd, int8_t* dst) {
#if defined(__x86_64__)
  if (hd % 8 == 0 && use_avx2()) return quantize_int8_row_avx2(x, hd, dst);
#endif
  quantize_int8_row_portable(x, hd, dst);
}

}  // namespace tachyon::cpu
