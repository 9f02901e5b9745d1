// Backend::scatter_rows on the CPU: the given rows replaced, in order, a row out of
// range skipped, every other row untouched.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cpu/op_test_util.h"
#include "backend/ops.h"

namespace tachyon {
namespace {

using testing_util::random_tensor;

TEST(ScatterRows, ReplacesTheGivenRowsOnly) {
  auto be = make_cpu_backend();
  std::mt19937 rng(5);
  const Tensor src = random_tensor({3, 7}, rng);
  const Tensor before = random_tensor({6, 7}, rng);
  Tensor out = before.clone();
  const std::vector<int32_t> rows = {4, 0, 9};
  be->scatter_rows(src, be->upload_i32(rows.data(), 3), out);
  for (int64_t r = 0; r < 6; ++r) {
    const int64_t from = r == 4 ? 0 : r == 0 ? 1 : -1;
    for (int64_t c = 0; c < 7; ++c)
      EXPECT_EQ(out.data<float>()[r * 7 + c],
                from >= 0 ? src.data<float>()[from * 7 + c] : before.data<float>()[r * 7 + c])
          << r << " " << c;
  }
}

}  // namespace
}  // namespace tachyon
