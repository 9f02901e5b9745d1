// The op table (backend/op_harness.h) on the CUDA backend in each compute dtype: every
// case's outputs against the CPU backend's from the same inputs rounded to that dtype.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

struct CudaCase {
  DType dtype;
  size_t index;  // into op_cases()
};

std::vector<CudaCase> cases_in(DType dtype) {
  std::vector<CudaCase> v;
  for (size_t i = 0; i < op_cases().size(); ++i) v.push_back({dtype, i});
  return v;
}

class OpHarnessCuda : public ::testing::TestWithParam<CudaCase> {
 protected:
  void SetUp() override {
    TACHYON_REQUIRE_GPU();
    gpu_ = cuda_test::make_gpu(GetParam().dtype);
  }
  std::unique_ptr<cuda::CudaBackend> gpu_;
};

TEST_P(OpHarnessCuda, MatchesCpu) {
  const CudaCase& c = GetParam();
  check_against_cpu(*gpu_, c.dtype, op_cases()[c.index]);
}

std::string case_name(const ::testing::TestParamInfo<CudaCase>& info) {
  return op_cases()[info.param.index].name;
}

INSTANTIATE_TEST_SUITE_P(cuda_bf16, OpHarnessCuda, ::testing::ValuesIn(cases_in(DType::kBF16)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(cuda_f16, OpHarnessCuda, ::testing::ValuesIn(cases_in(DType::kF16)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(cuda_f32, OpHarnessCuda, ::testing::ValuesIn(cases_in(DType::kF32)),
                         case_name);

}  // namespace
}  // namespace tachyon::op_harness
