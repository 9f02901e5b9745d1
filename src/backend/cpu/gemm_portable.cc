// Portable kernels: plain C++ written so the compiler can vectorise it for whatever
// baseline the build targets (fixed-width inner loops over independent lanes, no
// reductions that would need reassociation).
#include <algorithm>
#include <cstring>

#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"

namespace tachyon::cpu::detail {
namespace {

constexpr int kMr = 4;
constexpr int kNr = 8;
constexpr int kKc = 256;
constexpr int kGemvMaxM = 4;
constexpr int kLanes = 8;    // independent partial sums per dot product
constexpr int kChunk = 256;  // weight elements converted per step in the GEMV

template <DType D>
inline float load_w(const void* w, int64_t i) {
  if constexpr (D == DType::kF32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (D == DType::kBF16) {
    return bf16_to_f32(static_cast<const bf16*>(w)[i]);
  } else {
    return f16_to_f32(static_cast<const f16*>(w)[i]);
  }
}

template <DType D>
void convert_run(const void* w, int64_t begin, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = load_w<D>(w, begin + i);
}

template <DType D, int M>
void gemv_rows(const float* x, int64_t k, int64_t ldx, const void* w, int64_t j0, int64_t j1,
               const float* bias, float* y, int64_t ldy) {
  float buf[kChunk];
  for (int64_t j = j0; j < j1; ++j) {
    float acc[M][kLanes] = {};
    for (int64_t p0 = 0; p0 < k; p0 += kChunk) {
      const int64_t len = std::min<int64_t>(kChunk, k - p0);
      convert_run<D>(w, j * k + p0, len, buf);
      const int64_t full = len / kLanes * kLanes;
      for (int i = 0; i < M; ++i) {
        const float* xi = x + i * ldx + p0;
        for (int64_t p = 0; p < full; p += kLanes) {
          for (int l = 0; l < kLanes; ++l) acc[i][l] += xi[p + l] * buf[p + l];
        }
        for (int64_t p = full; p < len; ++p) acc[i][p - full] += xi[p] * buf[p];
      }
    }
    for (int i = 0; i < M; ++i) {
      float s = 0.f;
      for (int l = 0; l < kLanes; ++l) s += acc[i][l];
      y[i * ldy + j] = s + (bias != nullptr ? bias[j] : 0.f);
    }
  }
}

template <DType D>
void gemv_dtype(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t j0,
                int64_t j1, const float* bias, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; i += kGemvMaxM) {
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    switch (std::min<int64_t>(kGemvMaxM, m - i)) {
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

template <DType D>
void pack_dtype(const void* w, int64_t k, int64_t j0, int64_t rows, int64_t p0, int64_t kcb,
                float* out) {
  for (int64_t r = 0; r < kNr; ++r) {
    if (r < rows) {
      const int64_t base = (j0 + r) * k + p0;
      for (int64_t p = 0; p < kcb; ++p) out[p * kNr + r] = load_w<D>(w, base + p);
    } else {
      for (int64_t p = 0; p < kcb; ++p) out[p * kNr + r] = 0.f;
    }
  }
}

void pack(const void* w, DType dtype, int64_t k, int64_t j0, int64_t rows, int64_t p0, int64_t kcb,
          float* out) {
  switch (dtype) {
    case DType::kF32:
      return pack_dtype<DType::kF32>(w, k, j0, rows, p0, kcb, out);
    case DType::kF16:
      return pack_dtype<DType::kF16>(w, k, j0, rows, p0, kcb, out);
    case DType::kBF16:
      return pack_dtype<DType::kBF16>(w, k, j0, rows, p0, kcb, out);
    default:
      TACHYON_CHECK(false, "pack dtype {}", dtype_name(dtype));
  }
}

template <int R>
void micro_rows(const float* x, int64_t ldx, const float* panel, int64_t kcb, float* y, int64_t ldy,
                bool accumulate, const float* bias) {
  float acc[R][kNr];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < kNr; ++j) acc[i][j] = accumulate ? y[i * ldy + j] : 0.f;
  }
  for (int64_t p = 0; p < kcb; ++p) {
    const float* b = panel + p * kNr;
    for (int i = 0; i < R; ++i) {
      const float a = x[i * ldx + p];
      for (int j = 0; j < kNr; ++j) acc[i][j] += a * b[j];
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < kNr; ++j) y[i * ldy + j] = acc[i][j] + (bias != nullptr ? bias[j] : 0.f);
  }
}

void micro(int rows, const float* x, int64_t ldx, const float* panel, int64_t kcb, float* y,
           int64_t ldy, bool accumulate, const float* bias) {
  switch (rows) {
    case 1:
      return micro_rows<1>(x, ldx, panel, kcb, y, ldy, accumulate, bias);
    case 2:
      return micro_rows<2>(x, ldx, panel, kcb, y, ldy, accumulate, bias);
    case 3:
      return micro_rows<3>(x, ldx, panel, kcb, y, ldy, accumulate, bias);
    default:
      return micro_rows<4>(x, ldx, panel, kcb, y, ldy, accumulate, bias);
  }
}

}  // namespace

const GemmKernels& portable_kernels() {
  static const GemmKernels kernels{kGemvMaxM, gemv, kMr, kNr, kKc, pack, micro};
  return kernels;
}

}  // namespace tachyon::cpu::detail
