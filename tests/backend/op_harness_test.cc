// The op table on the CPU backend, the reference every other backend is held to: each
// case's outputs all written, the same on a second run, and within f32 rounding of its
// float64 formula where it has one.
#include <gtest/gtest.h>

#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

class OpHarness : public ::testing::TestWithParam<size_t> {};

TEST_P(OpHarness, MatchesFormula) {
  check_cpu_reference(op_cases()[GetParam()]);
}

INSTANTIATE_TEST_SUITE_P(cpu_f32, OpHarness, ::testing::Range<size_t>(0, op_cases().size()),
                         [](const auto& info) { return op_cases()[info.param].name; });

}  // namespace
}  // namespace tachyon::op_harness
