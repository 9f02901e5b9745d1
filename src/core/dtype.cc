#include "core/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace tachyon {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF64:
      return "f64";
    case DType::kF8E4M3:
      return "f8_e4m3";
    case DType::kF8E5M2:
      return "f8_e5m2";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI16:
      return "i16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string s;
  for (char c : name) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "f32" || s == "float32" || s == "float" || s == "fp32") return DType::kF32;
  if (s == "f16" || s == "float16" || s == "half" || s == "fp16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "f64" || s == "float64" || s == "double") return DType::kF64;
  if (s == "f8_e4m3" || s == "float8_e4m3fn" || s == "fp8_e4m3") return DType::kF8E4M3;
  if (s == "f8_e5m2" || s == "float8_e5m2" || s == "fp8_e5m2") return DType::kF8E5M2;
  if (s == "i8" || s == "int8") return DType::kI8;
  if (s == "u8" || s == "uint8") return DType::kU8;
  if (s == "i16" || s == "int16") return DType::kI16;
  if (s == "i32" || s == "int32") return DType::kI32;
  if (s == "i64" || s == "int64") return DType::kI64;
  if (s == "bool") return DType::kBool;
  return std::nullopt;
}

bool is_floating(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

float f16_to_f32(f16 v) {
  uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t mant = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (absu >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow: inf
  if (absu < 0x38800000u) {  // subnormal or zero in half
    if (absu < 0x33000000u) return f16{static_cast<uint16_t>(sign)};
    uint32_t exp = absu >> 23;
    uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 - (exp - 127) + 13 - 1 ... yields shift in [14, 24]
    uint32_t half_mant = mant >> (shift);
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return f16{static_cast<uint16_t>(sign | half_mant)};
  }
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t mant = absu & 0x7fffffu;
  uint32_t h = exp << 10 | mant >> 13;
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exp: correct
  return f16{static_cast<uint16_t>(sign | h)};
}

float load_as_f32(const void* data, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const f16*>(data)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const bf16*>(data)[i]);
    case DType::kF64:
      return static_cast<float>(static_cast<const double*>(data)[i]);
    default:
      raise<InvalidArgument>("cannot read {} as float", dtype_name(dtype));
  }
}

float e4m3_to_f32(uint8_t v) {
  const float sign = (v & 0x80) != 0 ? -1.f : 1.f;
  const int field = (v >> 3) & 0xf, mant = v & 7;
  if (field == 0xf && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (field == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(static_cast<float>(8 + mant), field - 7 - 3);
}

}  // namespace tachyon
