// Rows of the CPU's paged KV cache (backend/ops.h LayerKvCache) in f32, bf16, fp8
// (e4m3) or int8: a token's head_dim values of one KV head, the int8 row followed by its
// float scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace tachyon::cpu {

// An e4m3 (float8_e4m3fn) cache value, as the GPU's fp8 cache stores it: no scale,
// values rounded to nearest even and saturated to +-448 (core's f32_to_e4m3).
struct fp8_e4m3 {
  uint8_t bits;
};

// Whether the CPU kernels read and write a cache of this element type.
inline bool cpu_kv_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF8E4M3 || t == DType::kI8;
}

// The float scale stored after an int8 row of hd values.
inline float int8_row_scale(const int8_t* row, int64_t hd) {
  float s;
  std::memcpy(&s, row + hd, sizeof s);
  return s;
}

// The scales of the n int8 rows (of hd values, `ld` bytes apart) from `rows` into
// s[0 .. 16), zeros past n.
inline void int8_row_scales(const int8_t* rows, int64_t ld, int64_t hd, int n, float* s) {
  for (int j = 0; j < 16; ++j) s[j] = j < n ? int8_row_scale(rows + j * ld, hd) : 0.f;
}

// x[0 .. hd) as an int8 row: scale = max|x| / 127, q = round-to-nearest-even(x /
// scale) clamped to [-127, 127] (all zero, scale 0, for a zero row), the scale stored
// after the values. The AVX2 path (use_avx2(), hd % 8 == 0) gives the same bytes.
void quantize_int8_row(const float* x, int64_t hd, int8_t* dst);
// The portable path of quantize_int8_row (tests hold the AVX2 one to it).
void quantize_int8_row_portable(const float* x, int64_t hd, int8_t* dst);

// Writes x[0 .. hd) as row `row` (counting rows of the cache, stride hd values plus
// the row's extra bytes) of a cache of type t.
inline void write_kv_row(void* cache, DType t, int64_t row, int64_t hd, const float* x) {
  switch (t) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(cache) + row * hd, x, static_cast<size_t>(hd) * 4);
      return;
    case DType::kBF16: {
      bf16* d = static_cast<bf16*>(cache) + row * hd;
      for (int64_t i = 0; i < hd; ++i) d[i] = f32_to_bf16(x[i]);
      return;
    }
    case DType::kF8E4M3: {
      uint8_t* d = static_cast<uint8_t*>(cache) + row * hd;
      for (int64_t i = 0; i < hd; ++i) d[i] = f32_to_e4m3(x[i]);
      return;
    }
    case DType::kI8:
      quantize_int8_row(x, hd, static_cast<int8_t*>(cache) + row * (hd + 4));
      return;
    default:
      raise<Internal>("KV cache dtype {}", dtype_name(t));
  }
}

// Row `row` of a cache of type t as floats: the f32 row itself, else dequantized into
// `tmp` (hd floats).
inline const float* read_kv_row(const void* cache, DType t, int64_t row, int64_t hd, float* tmp) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(cache) + row * hd;
    case DType::kBF16: {
      const bf16* s = static_cast<const bf16*>(cache) + row * hd;
      for (int64_t i = 0; i < hd; ++i) tmp[i] = bf16_to_f32(s[i]);
      return tmp;
    }
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(cache) + row * hd;
      for (int64_t i = 0; i < hd; ++i) tmp[i] = e4m3_to_f32(s[i]);
      return tmp;
    }
    case DType::kI8: {
      const int8_t* s = static_cast<const int8_t*>(cache) + row * (hd + 4);
      const float scale = int8_row_scale(s, hd);
      for (int64_t i = 0; i < hd; ++i) tmp[i] = static_cast<float>(s[i]) * scale;
      return tmp;
    }
    default:
      raise<Internal>("KV cache dtype {}", dtype_name(t));
  }
  return tmp;
}

}  // namespace tachyon::cpu
