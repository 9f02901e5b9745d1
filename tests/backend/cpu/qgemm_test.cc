// The CPU's quantized weights (backend/cpu/qgemm.h) beyond the op harness: the repacked
// copy is recognised, an unprepared view gives the same product,
// and a matrix the kernels cannot read is refused before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/qgemm.h"
#include "core/error.h"
#include "core/quant.h"

namespace tachyon {
namespace {

Tensor random_matrix(int64_t n, int64_t k, uint32_t seed) {
  Tensor t = Tensor::empty({n, k}, DType::kF32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

TEST(CpuQuantized, PreparedAndUnpreparedAgree) {
  cpu::CpuBackend be;
  const Tensor view = quantized_view(quantize_int(random_matrix(40, 96, 1), 4, 32, false));
  const Tensor packed = be.prepare_linear_weight(view);
  ASSERT_NE(cpu::packed_quantized(packed), nullptr);
  EXPECT_EQ(cpu::packed_quantized(view), nullptr);
  EXPECT_EQ(packed.shape(), view.shape());
  EXPECT_EQ(cpu::packed_quantized(be.prepare_weight(view))->what, quantized(view)->str());
  const Tensor x = random_matrix(3, 96, 2);
  Tensor a = Tensor::empty({3, 40}, DType::kF32), b = Tensor::empty({3, 40}, DType::kF32);
  be.linear(x, packed, Tensor(), a, 0, Activation::kIdentity);
  be.linear(x, view, Tensor(), b, 0, Activation::kIdentity);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

TEST(CpuQuantized, Fp8NanIsRefused) {
  cpu::CpuBackend be;
  auto m = quantize_fp8(random_matrix(4, 16, 3), 1, 16);
  m->q.data<uint8_t>()[21] = 0xff;  // -NaN
  EXPECT_THROW(be.prepare_linear_weight(quantized_view(m)), InvalidArgument);
}

TEST(CpuQuantized, WrongInputWidthIsRefused) {
  cpu::CpuBackend be;
  const Tensor w =
      be.prepare_linear_weight(quantized_view(quantize_int(random_matrix(8, 64, 4), 8, 64, true)));
  const Tensor x = random_matrix(2, 32, 5);
  Tensor out = Tensor::empty({2, 8}, DType::kF32);
  out.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ANY_THROW(be.linear(x, w, Tensor(), out, 0, Activation::kIdentity));
  EXPECT_TRUE(std::isnan(out.data<float>()[0]));
}

}  // namespace
}  // namespace tachyon
