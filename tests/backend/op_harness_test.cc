// The op table on the CPU backend, the reference every other backend is held to: each
// case's outputs all written, the same on a second run, and within f32 rounding of its
// float64 formula where it has one.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

class OpHarness : public ::testing::TestWithParam<size_t> {};

TEST_P(OpHarness, MatchesFormula) {
  check_cpu_reference(op_cases()[GetParam()]);
}

INSTANTIATE_TEST_SUITE_P(cpu_f32, OpHarness, ::testing::Range<size_t>(0, op_cases().size()),
                         [](const auto& info) { return op_cases()[info.param].name; });

// The CPU-only cases (bf16 and int8 KV caches) and the quantized products (kernels of
// their own per path) on every instruction-set path.
std::vector<size_t> cpu_only_cases() {
  std::vector<size_t> v;
  for (size_t i = 0; i < op_cases().size(); ++i)
    if (op_cases()[i].cpu_only || op_cases()[i].name.starts_with("quant_")) v.push_back(i);
  return v;
}

class OpHarnessIsa : public ::testing::TestWithParam<std::tuple<cpu::CpuIsa, size_t>> {};

TEST_P(OpHarnessIsa, MatchesFormula) {
  const auto [isa, index] = GetParam();
  if (!cpu::cpu_isa_supported(isa)) GTEST_SKIP() << "CPU lacks " << cpu::cpu_isa_name(isa);
  cpu::CpuBackend be(nullptr, isa);
  check_cpu_reference(op_cases()[index], &be);
}

INSTANTIATE_TEST_SUITE_P(cpu_isa, OpHarnessIsa,
                         ::testing::Combine(::testing::Values(cpu::CpuIsa::kPortable,
                                                              cpu::CpuIsa::kAvx2,
                                                              cpu::CpuIsa::kAvx512),
                                            ::testing::ValuesIn(cpu_only_cases())),
                         [](const auto& info) {
                           return std::string(cpu::cpu_isa_name(std::get<0>(info.param))) + "_" +
                                  op_cases()[std::get<1>(info.param)].name;
                         });

}  // namespace
}  // namespace tachyon::op_harness
