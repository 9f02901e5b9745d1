#include "backend/cuda/cuda_check.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw Internal(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(err),
                             cudaGetErrorString(err), expr, file, line));
}

void throw_kernel_error(const char* message, const char* file, int line) {
  throw Internal(fmt::format("CUDA launcher check failed at {}:{}: {}", file, line, message));
}

void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  throw Internal(fmt::format("cuBLAS error {} ({}) in {} at {}:{}", cublasGetStatusName(st),
                             cublasGetStatusString(st), expr, file, line));
}

namespace {
std::atomic<bool> g_pdl{false};
}  // namespace

bool pdl_enabled() {
  return g_pdl.load(std::memory_order_relaxed);
}

void set_pdl_enabled(bool on) {
  g_pdl.store(on, std::memory_order_relaxed);
}

bool env_flag(const char* name, bool fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || env[0] == '\0') return fallback;
  const std::string v = env;
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  throw InvalidArgument(fmt::format("{}: '{}' is not 0 or 1", name, v));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace tachyon::cuda
