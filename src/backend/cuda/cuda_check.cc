#include "backend/cuda/cuda_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

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

int max_dynamic_smem() {
  static std::atomic<int> cache[64];  // per device; 0: not read yet
  int dev = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

void allow_dynamic_smem(const void* kernel, size_t bytes) {
  // Sizes up to the default 48 KB are raised too: the limit covers the kernel's static
  // shared memory as well, so 48 KB of dynamic memory beside any static needs it.
  if (bytes == 0) return;
  struct Raised {
    const void* kernel;
    int device;
    size_t bytes;
  };
  auto find = [](std::vector<Raised>& v, const void* k, int dev) {
    return std::find_if(v.begin(), v.end(),
                        [&](const Raised& r) { return r.kernel == k && r.device == dev; });
  };
  int dev = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&dev));
  // Launch paths call this every time: this thread's copy of what is already raised
  // answers without the lock.
  thread_local std::vector<Raised> seen;
  if (auto it = find(seen, kernel, dev); it != seen.end() && it->bytes >= bytes) return;
  static std::mutex mu;
  static std::vector<Raised> raised;
  std::lock_guard<std::mutex> lock(mu);
  auto it = find(raised, kernel, dev);
  if (it == raised.end() || it->bytes < bytes) {
    TACHYON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
    if (it != raised.end())
      it->bytes = bytes;
    else
      it = raised.insert(raised.end(), {kernel, dev, bytes});
  }
  if (auto mine = find(seen, kernel, dev); mine != seen.end())
    mine->bytes = it->bytes;
  else
    seen.push_back(*it);
}

bool runs_sm90a_image(const void* kernel) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90 && attr.ptxVersion >= 90;
}

int resident_blocks(const void* kernel, int threads, size_t smem) {
  struct Known {
    const void* kernel;
    int device;
    int threads;
    size_t smem;
    int blocks;
  };
  int dev = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&dev));
  // Launch paths ask at every launch: each thread keeps its own answers (no lock).
  thread_local std::vector<Known> known;
  for (const Known& e : known)
    if (e.kernel == kernel && e.device == dev && e.threads == threads && e.smem == smem)
      return e.blocks;
  int per_sm = 0, sms = 0;
  TACHYON_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int blocks = std::max(per_sm, 1) * std::max(sms, 1);
  known.push_back({kernel, dev, threads, smem, blocks});
  return blocks;
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
