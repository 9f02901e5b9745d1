// What the kernel benchmark's families (kernel_bench*.cc) share: random bf16 weights,
// the event timing of back-to-back calls, cuBLASLt's product as the reference, and the
// families' entry points.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "device_values.h"
#include "model_dims.h"

namespace tachyon::bench {

struct Shape5 {
  const char* name;
  int64_t n, k;
};

using Dims = bench::ModelDims;

// Fast deterministic pseudo-random bf16 values in about [-1, 1].
inline std::vector<uint16_t> random_bf16(int64_t n, uint64_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float f = static_cast<float>(static_cast<int32_t>(s >> 40) - (1 << 23)) / (1 << 23);
    x = f32_to_bf16(f).bits;
  }
  return v;
}

inline Tensor upload_random(cuda::CudaBackend& be, const Shape& shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const std::vector<uint16_t> h = random_bf16(n, seed);
  return be.upload(h.data(), shape, DType::kBF16, {});
}

// Median over 5 batches of the time per call of fn(i) for i = 0..calls-1 in a row.
template <typename Fn>
double time_calls(cuda::CudaBackend& be, int calls, Fn fn) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < calls; ++i) fn(i);  // warm-up (and tuning, the first time)
  std::vector<double> t;
  for (int b = 0; b < 5; ++b) {
    cudaEventRecord(e0, be.stream());
    for (int i = 0; i < calls; ++i) fn(i);
    cudaEventRecord(e1, be.stream());
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(ms * 1e-3 / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return bench::median(t);
}

// cuBLASLt's product y[m, n] = x[m, k] w[n, k]^T (bf16), what the wgmma GEMM replaces,
// on a Gemm of the bench's own (the backend runs it only where the wgmma GEMM does not).
inline void lt_product(cuda::Gemm& lt, const Tensor& x, const Tensor& w, Tensor& y) {
  cuda::GemmArgs g;
  g.m = x.dim(0);
  g.n = w.dim(0);
  g.k = x.dim(1);
  g.x = x.raw();
  g.w = w.raw();
  g.y = y.raw();
  g.ldy = y.dim(1);
  lt.run(g);
}

// The families (tachyon_kernel_bench --only NAME).
void gemm_rates(const Dims& d, const std::vector<int64_t>& ms, int reps);      // gemm
void row_rates(const Dims& d, int reps);                                       // rows
void wgmma_rates(const Dims& d, const std::vector<int64_t>& ms, int reps);     // wgmma
void epilogue_rates(const Dims& d, const std::vector<int64_t>& ms, int reps);  // epilogue
void gemm_algos(const Dims& d, const std::vector<int64_t>& ms);                // lt_algos
void quant_rates(const Dims& d, const std::vector<int64_t>& ms, int reps);     // quant
void lora_rates(const Dims& d, int reps);                                      // lora

}  // namespace tachyon::bench
