// Element types and scalar conversions between them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tachyon {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kF8E4M3,
  kF8E5M2,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
size_t dtype_size(DType dtype);
// Lower-case name: "f32", "bf16", ...
std::string_view dtype_name(DType dtype);
// Parses our names and the common spellings found in configs and checkpoints
// ("float32", "bfloat16", "F16", "torch.float16", ...).
std::optional<DType> parse_dtype(std::string_view name);
bool is_floating(DType dtype);

// bfloat16 and IEEE half stored as raw bits.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline float bf16_to_f32(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

float f16_to_f32(f16 v);
f16 f32_to_f16(float f);

// The e4m3 (float8_e4m3fn) byte nearest to f: round to nearest even, saturated to
// +-448 (the largest finite value); NaN gives NaN (0x7f, sign kept). As the GPU's
// fp8 KV cache stores a value.
inline uint8_t f32_to_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 24) & 0x80, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);   // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // 448 and beyond
  if (a < 0x3c800000u) {  // below 2^-6: a multiple of 2^-9 (8 of them is 2^-6 itself)
    float s;
    std::memcpy(&s, &a, 4);
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(s * 512.f)));
  }
  // 8 exponent and 3 mantissa bits rounded to nearest even, rebiased from 127 to 7;
  // what rounds past 448 saturates.
  const uint32_t v = ((a + 0x7ffffu + ((a >> 20) & 1)) >> 20) - ((127 - 7) << 3);
  return static_cast<uint8_t>(sign | (v > 0x7e ? 0x7e : v));
}
float e4m3_to_f32(uint8_t v);

// Reads element i of a buffer of the given floating dtype as float.
float load_as_f32(const void* data, DType dtype, size_t i);

}  // namespace tachyon
