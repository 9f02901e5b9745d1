// The one random generator of the model code (random checkpoints and the conformance
// fixtures' weights): PyTorch's CPU generator reproduced bit for bit, so that
// torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
// and NormalStream(seed).normal(out, n) give the same doubles.
//   - the generator is the reference MT19937 (init_genrand with a 32-bit seed);
//   - a uniform double is ((hi << 32 | lo) & (2^53 - 1)) * 2^-53, hi and lo two
//     successive 32-bit outputs;
//   - n >= 16 normals: n uniforms, then Box-Muller over each full group of 16 (u1 = 1 -
//     d[j], u2 = d[j + 8] for j < 8); when n % 16 != 0, 16 more uniforms replace the
//     last 16 values and are transformed likewise.
#pragma once

#include <array>
#include <cstdint>

namespace tachyon {

class NormalStream {
 public:
  explicit NormalStream(uint32_t seed);

  // Discards n 32-bit outputs.
  void skip(uint64_t n);
  uint32_t next_u32();
  double uniform();
  // n >= 16 standard normal doubles (throws InvalidArgument for fewer).
  void normal(double* out, int64_t n);

 private:
  void twist();
  std::array<uint32_t, 624> mt_{};
  int index_ = 624;
};

}  // namespace tachyon
