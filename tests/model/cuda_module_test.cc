// The CUDA backend reached through its module (model/cuda_module.h), as `tachyon` reaches
// it: this binary links no CUDA code, so a CUDA build opens libtachyon_cuda.so through
// the build folder. Runs without a GPU: only the device count and the backend's
// argument checks are used.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/cuda_module.h"

namespace tachyon {
namespace {

#if defined(TACHYON_WITH_CUDA)

// The module loads unless the CUDA libraries it needs are not installed here; a
// missing module, an unresolved symbol or a stale module fail.
const CudaEntry* load_or_skip_reason(std::string* reason) {
  try {
    return &cuda_entry();
  } catch (const Unavailable& e) {
    const std::string what = e.what();
    const std::string prefix = std::string("cuda: cannot load ") + kCudaModuleName + ": ";
    const bool dependency_missing =
        what.rfind(prefix, 0) == 0 &&
        what.find("cannot open shared object file") != std::string::npos &&
        what.find(kCudaModuleName, prefix.size()) == std::string::npos;
    if (!dependency_missing) throw;
    *reason = what;
    return nullptr;
  }
}

TEST(CudaModule, LoadsAndItsErrorsReachTheCaller) {
  std::string reason;
  const CudaEntry* loaded = load_or_skip_reason(&reason);
  if (!loaded) GTEST_SKIP() << "no CUDA libraries here: " << reason;
  const CudaEntry& cuda = *loaded;
  EXPECT_EQ(cuda.version, kCudaEntryVersion);
  EXPECT_GE(cuda.device_count(), 0);
  EXPECT_EQ(&cuda, &cuda_entry());  // loaded once
  // An exception raised inside the module is caught here by its type: one copy of
  // the error classes, the executable's.
  CudaBackendOptions o;
  o.dtype = DType::kF8E4M3;
  try {
    cuda.make_backend(o);
    FAIL() << "an f8 compute dtype was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("computes in bf16, f16 or f32"), std::string::npos)
        << e.what();
  }
}

#else

TEST(CudaModule, AbsentWithoutCuda) {
  try {
    cuda_entry();
    FAIL() << "a build without CUDA found a CUDA module";
  } catch (const Unavailable& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cuda: cannot load libtachyon_cuda.so: ", 0), 0u)
        << e.what();
  }
  EXPECT_EQ(probe_cuda_entry(), nullptr);
}

#endif

}  // namespace
}  // namespace tachyon
