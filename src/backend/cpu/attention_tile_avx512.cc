// The AVX-512 paged-attention tile kernel (attention_tile.h). As the AVX2 one it walks
// the keys in chunks inside one cache block with an online softmax, but each chunk of
// up to 16 keys is transposed once (a few shuffles per key and 16 dimensions), so every
// row of the tile scores all its keys with one FMA per head dimension and a row's 16
// scores are one vector. A chunk is done in three passes over the rows (scores, softmax,
// P V) whose rows are independent, and sums are split so that FMAs do not wait on each
// other: with the 2 rows a head has in a decode step, latency, not arithmetic, was the
// limit. (Software prefetch of the next block measured slower than none.)
// GCC 12 reports its own _mm512_undefined_* helpers (used inside the reduction
// intrinsics) as maybe-uninitialised; they are undefined by design.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/cpu/attention_tile.h"
#include "backend/cpu/kv_rows.h"

#if defined(__x86_64__)
#include "backend/cpu/avx512_math.h"
#endif

namespace tachyon::cpu {

#if defined(__x86_64__)

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static_assert(kAttnKeyChunk == 16);

// Sixteen cache values from p as floats (int8: unscaled).
TACHYON_AVX512_INLINE __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
TACHYON_AVX512_INLINE __m512 load16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// e4m3 through IEEE half, as attention_tile.cc's load8 explains.
TACHYON_AVX512_INLINE __m512 load16(const fp8_e4m3* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h =
      _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7),
                      _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.f));
}
TACHYON_AVX512_INLINE __m512 load16(const int8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

// For the R (1 or 2) rows of acc (`hd` floats apart) and their probabilities p (16
// apart): acc[r][0 .. 16K) = corr[r] * acc[r] + sum_j p[r][j] * v_j[0 .. 16K), v_j = v +
// j * ld. Keys alternate between two partial sums, so that no accumulator waits on the
// previous key's FMA (the rows share each v_j load).
template <typename T, int R, int K>
TACHYON_AVX512 void accumulate_pv(float* acc, int64_t hd, const T* v, int64_t ld, const float* p,
                                  int n, const float* corr) {
  __m512 a[R][2][K];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]);
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      a[r][0][k] = _mm512_mul_ps(_mm512_loadu_ps(acc + r * hd + 16 * k), c);
      a[r][1][k] = _mm512_setzero_ps();
    }
  }
  int j = 0;
  for (; j + 2 <= n; j += 2) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const T* vj = v + (j + h) * ld;
#pragma GCC unroll 8
      for (int k = 0; k < K; ++k) {
        const __m512 vk = load16(vj + 16 * k);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r)
          a[r][h][k] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * 16 + j + h]), vk, a[r][h][k]);
      }
    }
  }
  if (j < n) {
    const T* vj = v + j * ld;
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      const __m512 vk = load16(vj + 16 * k);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r)
        a[r][0][k] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * 16 + j]), vk, a[r][0][k]);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k)
      _mm512_storeu_ps(acc + r * hd + 16 * k, _mm512_add_ps(a[r][0][k], a[r][1][k]));
  }
}

// accumulate_pv over the whole head dim, up to 8 vectors (128 floats) at a time; value
// rows `ld` elements apart.
template <typename T, int R, int... Ks>
TACHYON_AVX512 void accumulate_rows(float* acc, int hd, const T* v, int64_t ld, const float* p,
                                    int n, const float* corr, std::integer_sequence<int, Ks...>) {
  using Fn = void (*)(float*, int64_t, const T*, int64_t, const float*, int, const float*);
  static constexpr Fn kByWidth[] = {accumulate_pv<T, R, Ks + 1>...};
  for (int d0 = 0; d0 < hd; d0 += 128)
    kByWidth[std::min(8, (hd - d0) / 16) - 1](acc + d0, hd, v + d0, ld, p, n, corr);
}

template <typename T, int R>
TACHYON_AVX512 void accumulate_rows(float* acc, int hd, const T* v, int64_t ld, const float* p,
                                    int n, const float* corr) {
  accumulate_rows<T, R>(acc, hd, v, ld, p, n, corr, std::make_integer_sequence<int, 8>{});
}

// Scores of R (1 or 2) rows against the transposed chunk kt[d][16], four partial sums
// per row over d (so that no FMA waits on the previous dimension's).
template <int R>
TACHYON_AVX512 void score_rows(const float* const* q, const float* kt, int hd, float* out) {
  __m512 s[R][4];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) s[r][h] = _mm512_setzero_ps();
  int d = 0;
  for (; d + 4 <= hd; d += 4) {
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      const __m512 kd = _mm512_loadu_ps(kt + (d + h) * 16);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r)
        s[r][h] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d + h]), kd, s[r][h]);
    }
  }
  for (; d < hd; ++d) {
    const __m512 kd = _mm512_loadu_ps(kt + d * 16);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) s[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d]), kd, s[r][0]);
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
    _mm512_storeu_ps(out + r * 16, _mm512_add_ps(_mm512_add_ps(s[r][0], s[r][1]),
                                                 _mm512_add_ps(s[r][2], s[r][3])));
}

// Keys [j0, j0 + n) of one block, rows `ld` elements apart, into kt[d][16] (zeros past
// n; int8 unscaled).
template <typename T>
TACHYON_AVX512 void transpose_keys(const T* k, int n, int hd, int64_t ld, float* kt) {
  for (int d0 = 0; d0 < hd; d0 += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = i < n ? load16(k + i * ld + d0) : _mm512_setzero_ps();
    transpose16(r);
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) _mm512_storeu_ps(kt + (d0 + q) * 16, r[q]);
  }
}

// The float scales of the n int8 rows (of hd values, `ld` bytes apart) from `rows`, as
// one vector (zeros past n).
TACHYON_AVX512_INLINE __m512 int8_scales(const int8_t* rows, int64_t ld, int hd, int n) {
  const __m512i at = _mm512_add_epi32(
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(ld))),
      _mm512_set1_epi32(hd));
  const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1u);
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, at, rows, 1);
}

template <typename T>
TACHYON_AVX512 void tile_avx512(const AttnTile& t, float* scratch) {
  constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  const int R = t.rows, hd = t.head_dim;
  const int64_t ld = hd + (kInt8 ? 4 : 0);  // cache row stride, in elements
  const T* k_cache = static_cast<const T*>(t.k_cache);
  const T* v_cache = static_cast<const T*>(t.v_cache);
  const AttentionParams& p = *t.params;
  float* acc = scratch;                  // [R, hd]
  float* kt = acc + int64_t{R} * hd;     // [hd, 16] this chunk's keys, transposed
  float* probs = kt + int64_t{hd} * 16;  // [R, 16] scores, then probabilities
  float* m = probs + int64_t{R} * 16;    // [R] running max
  float* l = m + R;                      // [R] running sum
  float* corr = l + R;                   // [R] this chunk's rescaling of acc
  std::fill(acc, acc + int64_t{R} * hd, 0.f);
  std::fill(m, m + R, kNegInf);
  std::fill(l, l + R, 0.f);

  int64_t jmin = t.lo[0], jmax = t.idx[0];
  for (int r = 1; r < R; ++r) {
    jmin = std::min(jmin, t.lo[r]);
    jmax = std::max(jmax, t.idx[r]);
  }
  const int64_t bs = t.block_size;
  const int rows_per_head = R / t.heads;
  auto chunk_end = [&](int64_t j0) { return std::min({(j0 / bs + 1) * bs, j0 + 16, jmax + 1}); };
  // Element offset of key j0 of kv head g.
  auto chunk_row = [&](int64_t j0, int g) {
    return ((t.blocks[j0 / bs] * t.num_kv_heads + g) * bs + j0 % bs) * ld;
  };
  const __m512 lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

  for (int64_t j0 = jmin; j0 <= jmax;) {
    const int64_t j1 = chunk_end(j0);
    const int n = static_cast<int>(j1 - j0);
    // Scores of every row, head by head (each head's keys transposed once).
    for (int hh = 0; hh < t.heads; ++hh) {
      const T* kc = k_cache + chunk_row(j0, t.kv_head + hh);
      transpose_keys(kc, n, hd, ld, kt);
      const int r0 = hh * rows_per_head, r1 = r0 + rows_per_head;
      int r = r0;
      for (; r + 2 <= r1; r += 2) score_rows<2>(t.q + r, kt, hd, probs + r * 16);
      if (r < r1) score_rows<1>(t.q + r, kt, hd, probs + r * 16);
      if constexpr (kInt8) {  // each key row's scale into its scores
        const __m512 ks = int8_scales(kc, ld, hd, n);
        for (r = r0; r < r1; ++r)
          _mm512_storeu_ps(probs + r * 16, _mm512_mul_ps(_mm512_loadu_ps(probs + r * 16), ks));
      }
    }
    // Scale, softcap, ALiBi, mask; the online softmax of every row (independent rows,
    // so their reductions and exponentials overlap).
    for (int r = 0; r < R; ++r) {
      __m512 x = _mm512_mul_ps(_mm512_loadu_ps(probs + r * 16), _mm512_set1_ps(p.scale));
      if (p.softcap > 0.f) {
        x = _mm512_mul_ps(_mm512_set1_ps(p.softcap),
                          tanh512(_mm512_mul_ps(x, _mm512_set1_ps(1.f / p.softcap))));
      }
      if (t.alibi) {
        __m512 b = _mm512_mul_ps(_mm512_set1_ps(t.slope[r]),
                                 _mm512_add_ps(lane, _mm512_set1_ps(static_cast<float>(j0))));
        if (p.alibi_bias_bf16) {
          // Round to bfloat16, nearest even.
          __m512i u = _mm512_castps_si512(b);
          const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
          u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
          b = _mm512_castsi512_ps(
              _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
        }
        x = _mm512_fmadd_ps(_mm512_set1_ps(p.alibi_scale), b, x);
      }
      const float lo = static_cast<float>(std::max<int64_t>(t.lo[r] - j0, 0));
      const float hi = static_cast<float>(std::min<int64_t>(t.idx[r] - j0, n - 1));
      const __mmask16 keep = _mm512_cmp_ps_mask(lane, _mm512_set1_ps(lo), _CMP_GE_OQ) &
                             _mm512_cmp_ps_mask(lane, _mm512_set1_ps(hi), _CMP_LE_OQ);
      if (keep == 0) {  // no visible key in this chunk: nothing changes
        corr[r] = 1.f;
        _mm512_storeu_ps(probs + r * 16, _mm512_setzero_ps());
        continue;
      }
      x = _mm512_mask_blend_ps(keep, _mm512_set1_ps(kNegInf), x);
      const float mnew = std::max(m[r], _mm512_reduce_max_ps(x));
      corr[r] = m[r] == kNegInf ? 0.f : std::exp(m[r] - mnew);
      m[r] = mnew;
      const __m512 e = _mm512_maskz_mov_ps(keep, exp512(_mm512_sub_ps(x, _mm512_set1_ps(mnew))));
      _mm512_storeu_ps(probs + r * 16, e);
      l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(e);
    }
    // acc = corr * acc + P V, head by head.
    for (int hh = 0; hh < t.heads; ++hh) {
      const T* vc = v_cache + chunk_row(j0, t.kv_head + hh);
      const int r1 = (hh + 1) * rows_per_head;
      int r = hh * rows_per_head;
      if constexpr (kInt8) {  // each value row's scale into its probability
        const __m512 vs = int8_scales(vc, ld, hd, n);
        for (int rr = r; rr < r1; ++rr)
          _mm512_storeu_ps(probs + rr * 16, _mm512_mul_ps(_mm512_loadu_ps(probs + rr * 16), vs));
      }
      for (; r + 2 <= r1; r += 2)
        accumulate_rows<T, 2>(acc + int64_t{r} * hd, hd, vc, ld, probs + r * 16, n, corr + r);
      if (r < r1)
        accumulate_rows<T, 1>(acc + int64_t{r} * hd, hd, vc, ld, probs + r * 16, n, corr + r);
    }
    j0 = j1;
  }
  for (int r = 0; r < R; ++r) {
    const __m512 inv = _mm512_set1_ps(l[r] > 0.f ? 1.f / l[r] : 0.f);
    for (int d = 0; d < hd; d += 16)
      _mm512_storeu_ps(t.out[r] + d,
                       _mm512_mul_ps(_mm512_loadu_ps(acc + int64_t{r} * hd + d), inv));
  }
}

}  // namespace

void attention_tile_avx512(const AttnTile& t, float* scratch) {
  switch (t.kv_dtype) {
    case DType::kBF16:
      return tile_avx512<bf16>(t, scratch);
    case DType::kF8E4M3:
      return tile_avx512<fp8_e4m3>(t, scratch);
    case DType::kI8:
      return tile_avx512<int8_t>(t, scratch);
    default:
      return tile_avx512<float>(t, scratch);
  }
}

#else

void attention_tile_avx512(const AttnTile&, float*) {}

#endif

}  // namespace tachyon::cpu
