#include "backend/cpu/vec.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/settings.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#include "backend/cpu/avx2_math.h"
#define TACHYON_X86 1
#else
#define TACHYON_X86 0
#endif

namespace tachyon::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;

bool detect_avx2() {
#if TACHYON_X86
  if (setting_env_bool("cpu-portable")) return false;
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 directly: clang before 15 does not know the "f16c" feature name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

// ---- portable paths --------------------------------------------------------------

float dot_portable(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.f;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void axpy_portable(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Four interleaved partial sums (element i goes to sum i % 4), as the AVX2 path's lanes.
double sum_squares_portable(const float* x, int64_t n, double center) {
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) {
      const double c = double{x[i + j]} - center;
      acc[j] += c * c;
    }
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) s += (double{x[i]} - center) * (double{x[i]} - center);
  return s;
}

double sum_portable(const float* x, int64_t n) {
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) acc[j] += x[i + j];
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) s += x[i];
  return s;
}

#if TACHYON_X86
// ---- AVX2 paths --------------------------------------------------------------------

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

__attribute__((target("avx2,fma"))) void dot_rows_add_avx2(const float* rows, int64_t stride,
                                                           int64_t n, const float* x, int64_t len,
                                                           float* out) {
  int64_t i = 0;
  if (len % 8 == 0) {
    for (; i + 8 <= n; i += 8) {
      __m256 acc[8];
      for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
      for (int64_t j = 0; j < len; j += 8) {
        const __m256 xv = _mm256_loadu_ps(x + j);
        for (int k = 0; k < 8; ++k)
          acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(rows + (i + k) * stride + j), xv, acc[k]);
      }
      // Row k's sum into lane k: pairwise sums within the halves, then the halves added.
      const __m256 u0 =
          _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
      const __m256 u1 =
          _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
      const __m256 sum =
          _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
      _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), sum));
    }
  }
  for (; i < n; ++i) out[i] += dot_avx2(rows + i * stride, x, len);
}

__attribute__((target("avx2,fma"))) void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target("avx2,fma"))) inline double hsum256d(__m256d v) {
  const __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
  return (_mm_cvtsd_f64(lo) + _mm_cvtsd_f64(_mm_unpackhi_pd(lo, lo))) +
         (_mm_cvtsd_f64(hi) + _mm_cvtsd_f64(_mm_unpackhi_pd(hi, hi)));
}

// The portable path's four partial sums in the four lanes.
__attribute__((target("avx2,fma"))) double sum_squares_avx2(const float* x, int64_t n,
                                                            double center) {
  const __m256d c = _mm256_set1_pd(center);
  __m256d acc = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), c);
    acc = _mm256_add_pd(acc, _mm256_mul_pd(d, d));
  }
  double s = hsum256d(acc);
  for (; i < n; ++i) s += (double{x[i]} - center) * (double{x[i]} - center);
  return s;
}

__attribute__((target("avx2,fma"))) double sum_avx2(const float* x, int64_t n) {
  __m256d acc = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
  double s = hsum256d(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}

__attribute__((target("avx2,fma,f16c"))) void convert_f16_avx2(const uint16_t* src, int64_t n,
                                                               float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(f16{src[i]});
}

__attribute__((target("avx2,fma"))) void convert_bf16_avx2(const uint16_t* src, int64_t n,
                                                           float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(bf16{src[i]});
}

__attribute__((target("avx2,fma"))) inline __m256 act256(__m256 x, Activation act) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 half = _mm256_set1_ps(0.5f);
  switch (act) {
    case Activation::kIdentity:
      return x;
    case Activation::kSilu: {
      __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
      return _mm256_div_ps(x, _mm256_add_ps(one, e));
    }
    case Activation::kQuickGelu: {
      __m256 e = exp256(_mm256_mul_ps(x, _mm256_set1_ps(-1.702f)));
      return _mm256_div_ps(x, _mm256_add_ps(one, e));
    }
    case Activation::kRelu:
      return _mm256_max_ps(x, _mm256_setzero_ps());
    case Activation::kGelu: {
      __m256 e = erf256(_mm256_mul_ps(x, _mm256_set1_ps(kInvSqrt2)));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, e));
    }
    case Activation::kGeluTanh: {
      __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      __m256 inner = _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi),
                                   _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, tanh256(inner)));
    }
  }
  return x;
}

__attribute__((target("avx2,fma"))) void activate_avx2(float* x, int64_t n, Activation act) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, act256(_mm256_loadu_ps(x + i), act));
  for (; i < n; ++i) x[i] = activation_ref(x[i], act);
}

__attribute__((target("avx2,fma"))) void gated_avx2(const float* gate, const float* up, float* out,
                                                    int64_t n, Activation act) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        out + i, _mm256_mul_ps(act256(_mm256_loadu_ps(gate + i), act), _mm256_loadu_ps(up + i)));
  for (; i < n; ++i) out[i] = activation_ref(gate[i], act) * up[i];
}
#endif

}  // namespace

bool use_avx2() {
  static const bool v = detect_avx2();
  return v;
}

float activation_ref(float x, Activation act) {
  switch (act) {
    case Activation::kIdentity:
      return x;
    case Activation::kSilu:
      return x / (1.f + std::exp(-x));
    case Activation::kGelu:
      return 0.5f * x * (1.f + std::erf(x * kInvSqrt2));
    case Activation::kGeluTanh:
      return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    case Activation::kRelu:
      return x > 0.f ? x : 0.f;
    case Activation::kQuickGelu:
      return x / (1.f + std::exp(-1.702f * x));
  }
  return x;
}

float dot(const float* a, const float* b, int64_t n) {
#if TACHYON_X86
  if (use_avx2()) return dot_avx2(a, b, n);
#endif
  return dot_portable(a, b, n);
}

void dot_rows_add(const float* rows, int64_t stride, int64_t n, const float* x, int64_t len,
                  float* out) {
#if TACHYON_X86
  if (use_avx2()) return dot_rows_add_avx2(rows, stride, n, x, len, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] += dot_portable(rows + i * stride, x, len);
}

void axpy(float a, const float* x, float* y, int64_t n) {
#if TACHYON_X86
  if (use_avx2()) return axpy_avx2(a, x, y, n);
#endif
  axpy_portable(a, x, y, n);
}

double sum_f64(const float* x, int64_t n) {
#if TACHYON_X86
  if (use_avx2()) return sum_avx2(x, n);
#endif
  return sum_portable(x, n);
}

double sum_squares_f64(const float* x, int64_t n, double center) {
#if TACHYON_X86
  if (use_avx2()) return sum_squares_avx2(x, n, center);
#endif
  return sum_squares_portable(x, n, center);
}

void scale(float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

void convert_row(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
#if TACHYON_X86
      if (use_avx2()) return convert_bf16_avx2(s, n, dst);
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(bf16{s[i]});
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
#if TACHYON_X86
      if (use_avx2()) return convert_f16_avx2(s, n, dst);
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(f16{s[i]});
      return;
    }
    default:
      TACHYON_CHECK(false, "convert_row: unsupported dtype {}", dtype_name(dtype));
  }
}

void activate(float* x, int64_t n, Activation act) {
  if (act == Activation::kIdentity) return;
#if TACHYON_X86
  if (use_avx2()) return activate_avx2(x, n, act);
#endif
  for (int64_t i = 0; i < n; ++i) x[i] = activation_ref(x[i], act);
}

void gated(const float* gate, const float* up, float* out, int64_t n, Activation act) {
#if TACHYON_X86
  if (use_avx2()) return gated_avx2(gate, up, out, n, act);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = activation_ref(gate[i], act) * up[i];
}

}  // namespace tachyon::cpu
