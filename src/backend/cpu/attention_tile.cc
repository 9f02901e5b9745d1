#include "backend/cpu/attention_tile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/kv_rows.h"
#include "core/dtype.h"

#if defined(__x86_64__)
#include "backend/cpu/avx2_math.h"
#endif

namespace tachyon::cpu {

#if defined(__x86_64__)

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Eight cache values from p as floats (int8: unscaled).
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// e4m3 bits moved into an IEEE half ((b & 0x7f) << 7, the sign to bit 15) are the
// value times 2^-8, subnormals included (both formats' subnormals scale the same way).
// 0x7f / 0xff (NaN) read as +-480; the cache never holds them but from a NaN input.
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const fp8_e4m3* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 7),
                                 _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.f));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const int8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

// s[r][j] = q_r . k_j for rows [r0, r0 + 4) and keys [j0, j0 + 2); missing rows or
// keys point at valid memory and their results are not used.
template <typename T>
__attribute__((target("avx2,fma,f16c"))) inline void dot_block(const float* const* q, const T* k0,
                                                               const T* k1, int hd,
                                                               float out[4][2]) {
  __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a10 = _mm256_setzero_ps(),
         a11 = _mm256_setzero_ps(), a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps(),
         a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) {
    const __m256 x0 = load8(k0 + d), x1 = load8(k1 + d);
    __m256 y = _mm256_loadu_ps(q[0] + d);
    a00 = _mm256_fmadd_ps(y, x0, a00);
    a01 = _mm256_fmadd_ps(y, x1, a01);
    y = _mm256_loadu_ps(q[1] + d);
    a10 = _mm256_fmadd_ps(y, x0, a10);
    a11 = _mm256_fmadd_ps(y, x1, a11);
    y = _mm256_loadu_ps(q[2] + d);
    a20 = _mm256_fmadd_ps(y, x0, a20);
    a21 = _mm256_fmadd_ps(y, x1, a21);
    y = _mm256_loadu_ps(q[3] + d);
    a30 = _mm256_fmadd_ps(y, x0, a30);
    a31 = _mm256_fmadd_ps(y, x1, a31);
  }
  out[0][0] = hsum256(a00);
  out[0][1] = hsum256(a01);
  out[1][0] = hsum256(a10);
  out[1][1] = hsum256(a11);
  out[2][0] = hsum256(a20);
  out[2][1] = hsum256(a21);
  out[3][0] = hsum256(a30);
  out[3][1] = hsum256(a31);
}

// acc[0 .. 8K) = corr * acc + sum_j p[j] * v_j[0 .. 8K), v_j = v + j * ld: the
// accumulators stay in registers across the keys.
template <int K, typename T>
__attribute__((target("avx2,fma,f16c"))) inline void accumulate_pv(float* acc, const T* v,
                                                                   int64_t ld, const float* p,
                                                                   int n, float corr) {
  __m256 a[K];
  const __m256 c = _mm256_set1_ps(corr);
  for (int k = 0; k < K; ++k) a[k] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * k), c);
  for (int j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const T* vj = v + j * ld;
    for (int k = 0; k < K; ++k) a[k] = _mm256_fmadd_ps(pj, load8(vj + 8 * k), a[k]);
  }
  for (int k = 0; k < K; ++k) _mm256_storeu_ps(acc + 8 * k, a[k]);
}

template <typename T>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const AttnTile& t, float* scratch) {
  constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  const int R = t.rows, hd = t.head_dim;
  const int64_t ld = hd + (kInt8 ? 4 : 0);  // cache row stride, in elements
  float ks[kAttnKeyChunk], vs[kAttnKeyChunk];
  const AttentionParams& p = *t.params;
  float* acc = scratch;                       // [R, hd]
  float* s = acc + int64_t{R} * hd;           // [R, kAttnKeyChunk]
  float* m = s + int64_t{R} * kAttnKeyChunk;  // [R] running max
  float* l = m + R;                           // [R] running sum
  std::fill(acc, acc + int64_t{R} * hd, 0.f);
  std::fill(m, m + R, kNegInf);
  std::fill(l, l + R, 0.f);

  int64_t jmin = t.lo[0], jmax = t.idx[0];
  for (int r = 1; r < R; ++r) {
    jmin = std::min(jmin, t.lo[r]);
    jmax = std::max(jmax, t.idx[r]);
  }
  const float* qrows[kAttnTileMaxRows + 3];
  for (int r = 0; r < R; ++r) qrows[r] = t.q[r];
  for (int r = R; r < R + 3; ++r) qrows[r] = t.q[0];
  const int64_t bs = t.block_size;

  for (int64_t j0 = jmin; j0 <= jmax;) {
    const int64_t block_end = (j0 / bs + 1) * bs;
    const int64_t j1 = std::min({block_end, j0 + kAttnKeyChunk, jmax + 1});
    const int n = static_cast<int>(j1 - j0);
    const int64_t blk = t.blocks[j0 / bs];
    const int64_t row0 = ((blk * t.num_kv_heads + t.kv_head) * bs + j0 % bs) * ld;
    const T* kc = static_cast<const T*>(t.k_cache) + row0;  // keys j0 .. j1 - 1, ld apart
    const T* vc = static_cast<const T*>(t.v_cache) + row0;
    if constexpr (kInt8) {
      int8_row_scales(kc, ld, hd, n, ks);
      int8_row_scales(vc, ld, hd, n, vs);
    }

    // Scores.
    for (int r0 = 0; r0 < R; r0 += 4) {
      for (int jj = 0; jj < n; jj += 2) {
        float out[4][2];
        dot_block(qrows + r0, kc + int64_t{jj} * ld, kc + int64_t{std::min(jj + 1, n - 1)} * ld, hd,
                  out);
        if constexpr (kInt8) {
          for (auto& o : out) {
            o[0] *= ks[jj];
            o[1] *= ks[std::min(jj + 1, n - 1)];
          }
        }
        for (int rr = 0; rr < 4 && r0 + rr < R; ++rr) {
          s[(r0 + rr) * kAttnKeyChunk + jj] = out[rr][0];
          if (jj + 1 < n) s[(r0 + rr) * kAttnKeyChunk + jj + 1] = out[rr][1];
        }
      }
    }
    // Scale, softcap, ALiBi, mask; online softmax; accumulate V.
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = 0; r < R; ++r) {
      float* sr = s + r * kAttnKeyChunk;
      for (int jj = n; jj < kAttnKeyChunk; ++jj) sr[jj] = 0.f;
      const float lo = static_cast<float>(std::max<int64_t>(t.lo[r] - j0, 0));
      const float hi = static_cast<float>(std::min<int64_t>(t.idx[r] - j0, n - 1));
      __m256 v[2], keep[2];
      __m256 vmax = _mm256_set1_ps(kNegInf);
      for (int h = 0; h < 2; ++h) {
        const __m256 jj = _mm256_add_ps(lane, _mm256_set1_ps(8.f * h));
        keep[h] = _mm256_and_ps(_mm256_cmp_ps(jj, _mm256_set1_ps(lo), _CMP_GE_OQ),
                                _mm256_cmp_ps(jj, _mm256_set1_ps(hi), _CMP_LE_OQ));
        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(sr + 8 * h), _mm256_set1_ps(p.scale));
        if (p.softcap > 0.f) {
          x = _mm256_mul_ps(_mm256_set1_ps(p.softcap),
                            tanh256(_mm256_mul_ps(x, _mm256_set1_ps(1.f / p.softcap))));
        }
        if (t.alibi) {
          __m256 b = _mm256_mul_ps(_mm256_set1_ps(t.slope[r]),
                                   _mm256_add_ps(jj, _mm256_set1_ps(static_cast<float>(j0))));
          if (p.alibi_bias_bf16) {
            // Round to bfloat16, nearest even.
            __m256i u = _mm256_castps_si256(b);
            __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
            b = _mm256_castsi256_ps(
                _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
          }
          x = _mm256_fmadd_ps(_mm256_set1_ps(p.alibi_scale), b, x);
        }
        v[h] = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), x, keep[h]);
        vmax = _mm256_max_ps(vmax, v[h]);
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float cmax = _mm_cvtss_f32(m4);
      if (cmax == kNegInf) continue;  // no visible key in this chunk
      const float mnew = std::max(m[r], cmax);
      const float corr = m[r] == kNegInf ? 0.f : std::exp(m[r] - mnew);
      m[r] = mnew;
      __m256 esum = _mm256_setzero_ps();
      for (int h = 0; h < 2; ++h) {
        __m256 e = exp256(_mm256_sub_ps(v[h], _mm256_set1_ps(mnew)));
        e = _mm256_and_ps(e, keep[h]);
        _mm256_storeu_ps(sr + 8 * h, e);
        esum = _mm256_add_ps(esum, e);
      }
      const float psum = hsum256(esum);
      l[r] = l[r] * corr + psum;
      if constexpr (kInt8) {  // each value row's scale into its probability
        for (int h = 0; h < 2; ++h)
          _mm256_storeu_ps(sr + 8 * h,
                           _mm256_mul_ps(_mm256_loadu_ps(sr + 8 * h), _mm256_loadu_ps(vs + 8 * h)));
      }
      float* ar = acc + int64_t{r} * hd;
      int d0 = 0;
      for (; d0 + 64 <= hd; d0 += 64) accumulate_pv<8>(ar + d0, vc + d0, ld, sr, n, corr);
      for (; d0 < hd; d0 += 8) accumulate_pv<1>(ar + d0, vc + d0, ld, sr, n, corr);
    }
    j0 = j1;
  }
  for (int r = 0; r < R; ++r) {
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    const __m256 vi = _mm256_set1_ps(inv);
    for (int d = 0; d < hd; d += 8)
      _mm256_storeu_ps(t.out[r] + d, _mm256_mul_ps(_mm256_loadu_ps(acc + int64_t{r} * hd + d), vi));
  }
}

}  // namespace

void attention_tile_avx2(const AttnTile& t, float* scratch) {
  switch (t.kv_dtype) {
    case DType::kBF16:
      return tile_avx2<bf16>(t, scratch);
    case DType::kF8E4M3:
      return tile_avx2<fp8_e4m3>(t, scratch);
    case DType::kI8:
      return tile_avx2<int8_t>(t, scratch);
    default:
      return tile_avx2<float>(t, scratch);
  }
}

#else

void attention_tile_avx2(const AttnTile&, float*) {}

#endif

}  // namespace tachyon::cpu
