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

// The backend's settings from the environment (host only: runs without a GPU).
TEST(CudaEnv, FlagAndIntegerSettings) {
  constexpr const char* kName = "TACHYON_TEST_SETTING";
  unsetenv(kName);
  EXPECT_TRUE(env_flag(kName, true));
  EXPECT_EQ(env_int(kName, 70, 0, 127), 70);
  setenv(kName, "", 1);
  EXPECT_FALSE(env_flag(kName, false));
  EXPECT_EQ(env_int(kName, 5, 0, 127), 5);
  setenv(kName, "1", 1);
  EXPECT_TRUE(env_flag(kName, false));
  EXPECT_EQ(env_int(kName, 5, 0, 127), 1);
  setenv(kName, "0", 1);
  EXPECT_FALSE(env_flag(kName, true));
  setenv(kName, "127", 1);
  EXPECT_EQ(env_int(kName, 5, 0, 127), 127);
  for (const char* bad : {"128", "-1", "12x", " 3", "0x10", "99999999999999999999999"}) {
    setenv(kName, bad, 1);
    EXPECT_THROW(env_int(kName, 5, 0, 127), InvalidArgument) << bad;
  }
  for (const char* bad : {"2", "yes", "on"}) {
    setenv(kName, bad, 1);
    EXPECT_THROW(env_flag(kName, false), InvalidArgument) << bad;
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace tachyon::cuda
