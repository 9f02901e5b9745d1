#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tachyon {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("torch.float16"), DType::kF16);
  EXPECT_EQ(parse_dtype("F32"), DType::kF32);
  EXPECT_FALSE(parse_dtype("float7").has_value());
}

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even gives 1.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
}

TEST(DType, F16MatchesExactRoundingOnRandomValues) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  // Every finite half converts to float and back exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    f16 v{static_cast<uint16_t>(h)};
    float f = f16_to_f32(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f).bits, v.bits) << h;
  }
  // Random floats round to the nearest half (checked against the neighbours).
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isfinite(f) || std::fabs(f) > 65000.f) continue;
    f16 h = f32_to_f16(f);
    double got = f16_to_f32(h);
    double err = std::fabs(got - f);
    for (int d : {-1, 1}) {
      f16 n{static_cast<uint16_t>(h.bits + d)};
      float nf = f16_to_f32(n);
      if (std::isnan(nf) || std::isinf(nf)) continue;
      if ((h.bits & 0x7fff) == 0 && d == -1) continue;
      EXPECT_LE(err, std::fabs(static_cast<double>(nf) - f)) << f;
    }
  }
}

// e4m3 (the fp8 KV cache): every byte's value, round trips, round-to-nearest-even at
// midpoints of normals and subnormals, saturation at +-448, NaN and signed zero.
TEST(DType, E4m3) {
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.f, -6));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
  EXPECT_EQ(e4m3_to_f32(0xb9), -1.125f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)) && std::isnan(e4m3_to_f32(0xff)));
  std::vector<float> finite;  // the non-negative values in order
  for (int b = 0; b < 256; ++b) {
    const float f = e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_e4m3(f), b) << b;
    if (b < 0x80) finite.push_back(f);
  }
  ASSERT_EQ(finite.size(), 127u);
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    ASSERT_LT(finite[i], finite[i + 1]);
    const float mid = 0.5f * (finite[i] + finite[i + 1]);
    const uint8_t even = (i % 2 == 0) ? static_cast<uint8_t>(i) : static_cast<uint8_t>(i + 1);
    EXPECT_EQ(f32_to_e4m3(mid), even) << mid;
    EXPECT_EQ(f32_to_e4m3(-mid), 0x80 | even) << -mid;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.f)), i) << mid;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1000.f)), i + 1) << mid;
  }
  EXPECT_EQ(f32_to_e4m3(460.f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::nanf("")), 0x7f);
  EXPECT_EQ(f32_to_e4m3(-0.f), 0x80);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.f, -11)), 0x00);  // below half the smallest subnormal
}

}  // namespace
}  // namespace tachyon
