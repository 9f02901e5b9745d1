#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tachyon::cuda {
namespace {

TEST(CudaSmoke, DeviceCountDoesNotThrow) {
  int n = device_count();
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  TACHYON_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  EXPECT_GT(prop.multiProcessorCount, 0);
  std::printf("device 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30));
}

}  // namespace
}  // namespace tachyon::cuda
