#include "engine/row_math.h"

#include <cmath>
#include <cstring>
#include <limits>

// The helpers below pass 32-byte vectors by value; they are always inlined, so the
// note about that ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tachyon {
namespace {

// Eight lanes: native on AVX2, pairs of SSE registers otherwise. The functions below
// are built twice (AVX2 and baseline) and picked at load time; every lane does the
// same operations in both, so results do not depend on the machine.
typedef float f4 __attribute__((vector_size(32)));
typedef int32_t i4 __attribute__((vector_size(32)));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TACHYON_ROW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TACHYON_ROW_CLONES
#endif
constexpr int kLanes = 8;

__attribute__((always_inline)) inline f4 load(const float* p) {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store(float* p, f4 v) {
  std::memcpy(p, &v, sizeof v);
}
inline f4 splat(float x) {
  return f4{x, x, x, x, x, x, x, x};
}
// mask ? a : b, lane by lane (mask lanes are all ones or all zeros).
__attribute__((always_inline)) inline f4 select(i4 mask, f4 a, f4 b) {
  return (f4)((mask & (i4)a) | (~mask & (i4)b));
}

// exp(x) for x <= 88: range reduction to r in [-ln2/2, ln2/2], a degree-6 polynomial,
// then scaling by 2^n through the exponent bits. Below -87 the result is 0.
__attribute__((always_inline)) inline f4 exp4(f4 x) {
  const i4 tiny = x < splat(-87.0f);
  x = select(tiny, splat(-87.0f), x);
  const f4 t = x * splat(1.44269504088896341f) + splat(0.5f);
  i4 n = __builtin_convertvector(t, i4);          // toward zero
  n += (i4)(__builtin_convertvector(n, f4) > t);  // floor: minus one where it rounded up
  const f4 nf = __builtin_convertvector(n, f4);
  const f4 r = x - nf * splat(0.693359375f) - nf * splat(-2.12194440e-4f);
  f4 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  const f4 y = p * r * r + r + splat(1.0f);
  const f4 scale = (f4)((n + 127) << 23);
  return select(tiny, splat(0.0f), y * scale);
}

}  // namespace

float fast_exp(float x) {
  return exp4(splat(x))[0];
}

TACHYON_ROW_CLONES float row_max(const float* x, int32_t n, bool* has_nan) {
  const float ninf = -std::numeric_limits<float>::infinity();
  f4 m0 = splat(ninf), m1 = m0, m2 = m0, m3 = m0;
  const f4 inf = splat(std::numeric_limits<float>::infinity());
  i4 bad = {};
  int32_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const f4 a = load(x + i), b = load(x + i + kLanes), c = load(x + i + 2 * kLanes),
             d = load(x + i + 3 * kLanes);
    bad |= (a != a) | (b != b) | (c != c) | (d != d) | (a == inf) | (b == inf) | (c == inf) |
           (d == inf);
    m0 = select(a > m0, a, m0);
    m1 = select(b > m1, b, m1);
    m2 = select(c > m2, c, m2);
    m3 = select(d > m3, d, m3);
  }
  m0 = select(m1 > m0, m1, m0);
  m2 = select(m3 > m2, m3, m2);
  m0 = select(m2 > m0, m2, m0);
  float m = ninf;
  bool nan = false;
  for (int k = 0; k < kLanes; ++k) {
    nan |= bad[k] != 0;
    m = m0[k] > m ? m0[k] : m;
  }
  for (; i < n; ++i) {
    nan |= x[i] != x[i] || x[i] == -ninf;
    m = x[i] > m ? x[i] : m;
  }
  *has_nan = nan;
  return m;
}

TACHYON_ROW_CLONES int32_t row_find(const float* x, int32_t n, float value) {
  int32_t i = 0;
  const f4 v = splat(value);
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const i4 hit = (load(x + i) == v) | (load(x + i + kLanes) == v) |
                   (load(x + i + 2 * kLanes) == v) | (load(x + i + 3 * kLanes) == v);
    int any = 0;
    for (int k = 0; k < kLanes; ++k) any |= hit[k];
    if (any != 0) break;
  }
  for (; i < n; ++i)
    if (x[i] == value) return i;
  return -1;
}

TACHYON_ROW_CLONES int32_t row_next_above(const float* x, int32_t n, int32_t from,
                                          float threshold) {
  int32_t i = from;
  const f4 t = splat(threshold);
  // Scalar up to a block boundary, then whole blocks skipped while nothing exceeds.
  for (; i < n && i % (4 * kLanes) != 0; ++i)
    if (x[i] > threshold) return i;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const i4 hit = (load(x + i) > t) | (load(x + i + kLanes) > t) | (load(x + i + 2 * kLanes) > t) |
                   (load(x + i + 3 * kLanes) > t);
    int any = 0;
    for (int k = 0; k < kLanes; ++k) any |= hit[k];
    if (any != 0) break;
  }
  for (; i < n; ++i)
    if (x[i] > threshold) return i;
  return -1;
}

TACHYON_ROW_CLONES double row_exp(const float* x, int32_t n, float m, float scale, float* w) {
  double total = 0;
  const f4 vm = splat(m), vs = splat(scale);
  int32_t i = 0;
  while (i + kLanes <= n) {
    // Float partial sums over at most 1024 terms, then double.
    f4 acc = splat(0.0f);
    const int32_t end = i + 1024 < n ? i + 1024 : n;
    for (; i + kLanes <= end; i += kLanes) {
      const f4 e = exp4((load(x + i) - vm) * vs);
      store(w + i, e);
      acc += e;
    }
    for (int k = 0; k < kLanes; ++k) total += acc[k];
  }
  for (; i < n; ++i) {
    w[i] = fast_exp((x[i] - m) * scale);
    total += w[i];
  }
  return total;
}

TACHYON_ROW_CLONES double row_exp_sum(const float* x, int32_t n, float m, float scale) {
  double total = 0;
  const f4 vm = splat(m);
  const f4 vs = splat(scale);
  int32_t i = 0;
  while (i + kLanes <= n) {
    f4 acc = splat(0.0f);
    const int32_t end = i + 1024 < n ? i + 1024 : n;
    for (; i + kLanes <= end; i += kLanes) acc += exp4((load(x + i) - vm) * vs);
    for (int k = 0; k < kLanes; ++k) total += acc[k];
  }
  for (; i < n; ++i) total += fast_exp((x[i] - m) * scale);
  return total;
}

}  // namespace tachyon
