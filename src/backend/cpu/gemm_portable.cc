// Portable kernels: no intrinsics. Arithmetic goes through 4-lane vector types (the
// GCC/Clang vector extension), which every target lowers to its own SIMD (SSE2, NEON,
// ...) or to scalar code; conversions are branch-free so their loops vectorise too.
#include <algorithm>
#include <cstring>

#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"

namespace tachyon::cpu::detail {
namespace {

using V4 = float __attribute__((vector_size(16)));

constexpr int kMr = 4;
constexpr int kNr = 8;
constexpr int kKc = 256;
constexpr int kGemvMaxM = 4;  // larger m goes to the blocked GEMM
constexpr int kChunk = 256;   // weight elements converted per step when packing

inline V4 load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store4(float* p, V4 v) {
  std::memcpy(p, &v, sizeof v);
}

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  // Exponent and mantissa moved into f32 position, then rescaled by 2^(127-15): exact
  // for normal and subnormal halves alike. Inf and NaN keep an all-ones exponent.
  const float scaled = bits_to_f32(em << 13) * 0x1p112f;
  uint32_t u;
  std::memcpy(&u, &scaled, 4);
  u = em >= 0x7c00u ? (em << 13) | 0x7f800000u : u;
  return bits_to_f32(u | sign);
}

template <DType D>
inline float load_w(const void* w, int64_t i) {
  if constexpr (D == DType::kF32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (D == DType::kBF16) {
    return bits_to_f32(static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16);
  } else {
    return f16_bits_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
}

template <DType D>
void convert_run(const void* w, int64_t begin, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = load_w<D>(w, begin + i);
}

using U16x4 = uint16_t __attribute__((vector_size(8)));
using U32x4 = uint32_t __attribute__((vector_size(16)));

template <typename To, typename From>
inline To bit_cast_vec(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &v, sizeof t);
  return t;
}

// Four weights from p (an element pointer) as f32, converted in registers.
template <DType D>
inline V4 load4_w(const void* w, int64_t i) {
  if constexpr (D == DType::kF32) {
    return load4(static_cast<const float*>(w) + i);
  } else {
    U16x4 h;
    std::memcpy(&h, static_cast<const uint16_t*>(w) + i, sizeof h);
    const U32x4 u = __builtin_convertvector(h, U32x4);
    if constexpr (D == DType::kBF16) {
      return bit_cast_vec<V4>(u << 16);
    } else {  // as f16_bits_to_f32, lane by lane
      const U32x4 sign = (u & 0x8000u) << 16;
      const U32x4 em = u & 0x7fffu;
      const V4 scaled = bit_cast_vec<V4>(em << 13) * 0x1p112f;
      const U32x4 special = reinterpret_cast<U32x4>(em >= 0x7c00u);  // all ones or zero
      const U32x4 bits =
          (bit_cast_vec<U32x4>(scaled) & ~special) | (((em << 13) | 0x7f800000u) & special);
      return bit_cast_vec<V4>(bits | sign);
    }
  }
}

inline float hsum(V4 v) {
  return (v[0] + v[1]) + (v[2] + v[3]);
}

// ---- GEMV: a weight row is converted in registers and dotted with M rows of x.

template <DType D, int M>
void gemv_rows(const float* x, int64_t k, int64_t ldx, const void* w, int64_t j0, int64_t j1,
               const float* bias, float* y, int64_t ldy) {
  const int64_t full = k / 8 * 8;
  for (int64_t j = j0; j < j1; ++j) {
    V4 acc[M][2] = {};
    const int64_t row = j * k;
    for (int64_t p = 0; p < full; p += 8) {
      const V4 b0 = load4_w<D>(w, row + p), b1 = load4_w<D>(w, row + p + 4);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        acc[i][0] += load4(x + i * ldx + p) * b0;
        acc[i][1] += load4(x + i * ldx + p + 4) * b1;
      }
    }
    for (int i = 0; i < M; ++i) {
      float s = hsum(acc[i][0] + acc[i][1]);
      for (int64_t p = full; p < k; ++p) s += x[i * ldx + p] * load_w<D>(w, row + p);
      y[i * ldy + j] = s + (bias != nullptr ? bias[j] : 0.f);
    }
  }
}

template <DType D>
void gemv_dtype(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t j0,
                int64_t j1, const float* bias, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; i += 4) {
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    switch (std::min<int64_t>(4, m - i)) {
      case 1:
        gemv_rows<D, 1>(xi, k, ldx, w, j0, j1, bias, yi, ldy);
        break;
      case 2:
        gemv_rows<D, 2>(xi, k, ldx, w, j0, j1, bias, yi, ldy);
        break;
      case 3:
        gemv_rows<D, 3>(xi, k, ldx, w, j0, j1, bias, yi, ldy);
        break;
      default:
        gemv_rows<D, 4>(xi, k, ldx, w, j0, j1, bias, yi, ldy);
        break;
    }
  }
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

// ---- GEMM building blocks.

template <DType D>
void pack_w_dtype(const void* w, int64_t k, int64_t j0, int64_t rows, int64_t p0, int64_t kcb,
                  float* out) {
  alignas(64) float buf[kChunk];
  for (int64_t r = 0; r < kNr; ++r) {
    for (int64_t c = 0; c < kcb; c += kChunk) {
      const int64_t len = std::min<int64_t>(kChunk, kcb - c);
      if (r < rows) {
        convert_run<D>(w, (j0 + r) * k + p0 + c, len, buf);
      } else {
        std::fill(buf, buf + len, 0.f);
      }
      for (int64_t p = 0; p < len; ++p) out[(c + p) * kNr + r] = buf[p];
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

void pack_x(const float* x, int64_t ldx, int rows, int64_t k, float* out) {
  for (int64_t p = 0; p < k; ++p) {
    for (int i = 0; i < kMr; ++i) out[p * kMr + i] = i < rows ? x[i * ldx + p] : 0.f;
  }
}

// R x 8 tile of y in 2R vector accumulators.
template <int R>
void micro_rows(const float* xp, const float* panel, int64_t kcb, float* y, int64_t ldy,
                bool accumulate, const float* bias) {
  V4 c[R][2];
  for (int i = 0; i < R; ++i) {
    c[i][0] = accumulate ? load4(y + i * ldy) : V4{};
    c[i][1] = accumulate ? load4(y + i * ldy + 4) : V4{};
  }
  for (int64_t p = 0; p < kcb; ++p) {
    const V4 b0 = load4(panel + p * kNr), b1 = load4(panel + p * kNr + 4);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const float a = xp[p * kMr + i];
      c[i][0] += a * b0;
      c[i][1] += a * b1;
    }
  }
  for (int i = 0; i < R; ++i) {
    if (bias != nullptr) {
      c[i][0] += load4(bias);
      c[i][1] += load4(bias + 4);
    }
    store4(y + i * ldy, c[i][0]);
    store4(y + i * ldy + 4, c[i][1]);
  }
}

void micro(int rows, const float* xp, const float* panel, int64_t kcb, float* y, int64_t ldy,
           bool accumulate, const float* bias) {
  switch (rows) {
    case 1:
      return micro_rows<1>(xp, panel, kcb, y, ldy, accumulate, bias);
    case 2:
      return micro_rows<2>(xp, panel, kcb, y, ldy, accumulate, bias);
    case 3:
      return micro_rows<3>(xp, panel, kcb, y, ldy, accumulate, bias);
    default:
      return micro_rows<4>(xp, panel, kcb, y, ldy, accumulate, bias);
  }
}

}  // namespace

const GemmKernels& portable_kernels() {
  static const GemmKernels kernels{kGemvMaxM, gemv,  kMr,     kNr,     kKc,    pack_w,
                                   pack_x,    micro, nullptr, nullptr, nullptr};
  return kernels;
}

}  // namespace tachyon::cpu::detail
