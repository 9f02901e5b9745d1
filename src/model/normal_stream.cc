#include "model/normal_stream.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tachyon {
namespace {

void box_muller16(double* d) {
  for (int j = 0; j < 8; ++j) {
    const double u1 = 1.0 - d[j], u2 = d[j + 8];
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * std::numbers::pi * u2;
    d[j] = r * std::cos(t);
    d[j + 8] = r * std::sin(t);
  }
}

}  // namespace

NormalStream::NormalStream(uint32_t seed) {
  mt_[0] = seed;
  for (uint32_t i = 1; i < 624; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
}

void NormalStream::twist() {
  for (int i = 0; i < 624; ++i) {
    const uint32_t y = (mt_[i] & 0x80000000u) | (mt_[(i + 1) % 624] & 0x7fffffffu);
    mt_[i] = mt_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
  }
  index_ = 0;
}

uint32_t NormalStream::next_u32() {
  if (index_ >= 624) twist();
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

void NormalStream::skip(uint64_t n) {
  // Whole blocks of 624 outputs need only the twist.
  while (n > 0 && index_ < 624) {
    next_u32();
    --n;
  }
  while (n >= 624) {
    twist();
    index_ = 624;
    n -= 624;
  }
  for (; n > 0; --n) next_u32();
}

double NormalStream::uniform() {
  const uint64_t hi = next_u32();
  const uint64_t lo = next_u32();
  return static_cast<double>(((hi << 32) | lo) & ((uint64_t{1} << 53) - 1)) *
         (1.0 / static_cast<double>(uint64_t{1} << 53));
}

void NormalStream::normal(double* out, int64_t n) {
  if (n < 16) raise<InvalidArgument>("a normal stream draws at least 16 values, not {}", n);
  for (int64_t i = 0; i < n; ++i) out[i] = uniform();
  for (int64_t i = 0; i + 16 <= n; i += 16) box_muller16(out + i);
  if (n % 16 != 0) {
    for (int64_t i = n - 16; i < n; ++i) out[i] = uniform();
    box_muller16(out + n - 16);
  }
}

}  // namespace tachyon
