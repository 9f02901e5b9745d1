// Counter-based random numbers (Philox4x32-10). A draw is a pure function of
// (key, counter), so a sequence's sampling depends only on its seed, its index in the
// request and its step, never on what else shares the batch or on the order of draws.
#pragma once

#include <array>
#include <cstdint>

namespace tachyon {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The Philox4x32 bijection with 10 rounds.
inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

// What a sampling draw is keyed by. `purpose` separates independent uses within one step.
struct RngKey {
  uint64_t seed = 0;
  uint32_t seq_index = 0;  // which of the request's sequences (0..n-1)
  uint64_t step = 0;       // the number of tokens the sequence had generated before
  uint32_t purpose = 0;
};

// A uniform double in [0, 1) with 53 random bits.
inline double rng_uniform(const RngKey& k) {
  const PhiloxCounter out = philox4x32_10(
      {static_cast<uint32_t>(k.step), static_cast<uint32_t>(k.step >> 32), k.seq_index, k.purpose},
      {static_cast<uint32_t>(k.seed), static_cast<uint32_t>(k.seed >> 32)});
  const uint64_t bits = (static_cast<uint64_t>(out[0]) << 32) | out[1];
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace tachyon
