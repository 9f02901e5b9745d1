// Portable C++ kernels of the quantized product (backend/cpu/qgemm.h).
#include <algorithm>
#include <array>

#include "backend/cpu/qgemm.h"
#include "core/dtype.h"

namespace tachyon::cpu::detail {
namespace {

constexpr int kMaxM = 4;

// e4m3 values times 2^-8 (the packed scales carry 2^8), exact.
const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int b = 0; b < 256; ++b) v[b] = e4m3_to_f32(static_cast<uint8_t>(b)) * (1.f / 256.f);
    return v;
  }();
  return t;
}

// The unscaled values of step t of a group (q - zero, or fp8 times 2^-8) for the panel's
// rows.
inline void decode_step(const QPackedWeight& w, const uint8_t* base, int64_t t, float* out) {
  const uint8_t* z = base + kQPanel * 4;
  const uint8_t* v = base + w.header_bytes();
  switch (w.kind) {
    case QKind::kFp8: {
      const auto& tab = fp8_table();
      for (int64_t r = 0; r < kQPanel; ++r) out[r] = tab[v[t * kQPanel + r]];
      break;
    }
    case QKind::kInt4:
      for (int64_t r = 0; r < kQPanel; ++r) {
        const uint8_t b = v[(t / 2) * kQPanel + r];
        const int q = t % 2 == 0 ? (b & 0xf) : (b >> 4);
        out[r] = static_cast<float>(q - (w.zeros ? z[r] : w.zero));
      }
      break;
    case QKind::kInt8:
      for (int64_t r = 0; r < kQPanel; ++r) {
        const uint8_t b = v[t * kQPanel + r];
        out[r] = w.signed_q ? static_cast<float>(static_cast<int8_t>(b))
                            : static_cast<float>(int{b} - (w.zeros ? z[r] : 0));
      }
      break;
  }
}

void gemv(const QPackedWeight& w, const float* x, int m, int64_t ldx, int64_t p0, int64_t p1,
          const float* bias, float* y, int64_t ldy) {
  float acc[kMaxM][kQPanel], gacc[kMaxM][kQPanel], wv[kQPanel];
  for (int64_t p = p0; p < p1; ++p) {
    std::fill(&acc[0][0], &acc[0][0] + kMaxM * kQPanel, 0.f);
    for (int64_t g = 0; g < w.groups; ++g) {
      const uint8_t* base = w.group_data(p, g);
      const auto* scale = reinterpret_cast<const float*>(base);
      const int64_t s0 = g * w.group, steps = w.group_steps(g);
      std::fill(&gacc[0][0], &gacc[0][0] + kMaxM * kQPanel, 0.f);
      for (int64_t t = 0; t < steps; ++t) {
        decode_step(w, base, t, wv);
        for (int i = 0; i < m; ++i) {
          const float xv = x[i * ldx + s0 + t];
          for (int64_t r = 0; r < kQPanel; ++r) gacc[i][r] += wv[r] * xv;
        }
      }
      for (int i = 0; i < m; ++i)
        for (int64_t r = 0; r < kQPanel; ++r) acc[i][r] += gacc[i][r] * scale[r];
    }
    const int64_t rows = std::min(kQPanel, w.n - p * kQPanel);
    for (int i = 0; i < m; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t j = p * kQPanel + r;
        y[i * ldy + j] = acc[i][r] + (bias != nullptr ? bias[j] : 0.f);
      }
  }
}

void dequant(const QPackedWeight& w, int64_t p, int64_t s0, int64_t steps, float* out,
             int64_t ldo) {
  float wv[kQPanel];
  for (int64_t s = s0; s < s0 + steps; ++s) {
    const int64_t g = s / w.group;
    const uint8_t* base = w.group_data(p, g);
    const auto* scale = reinterpret_cast<const float*>(base);
    decode_step(w, base, s - g * w.group, wv);
    float* o = out + (s - s0) * ldo;
    for (int64_t r = 0; r < kQPanel; ++r) o[r] = wv[r] * scale[r];
  }
}

}  // namespace

const QKernels& portable_qkernels() {
  static const QKernels k{kMaxM, gemv, dequant};
  return k;
}

}  // namespace tachyon::cpu::detail
