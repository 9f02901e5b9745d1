// Helpers for the CUDA tests: a CUDA backend per compute dtype, host <-> device copies
// of random tensors, and the error measure every op is held to.
//
// Inputs are drawn in f32, rounded to the compute dtype, and the same rounded values
// go to the reference (the CPU backend in f32, or a float64 loop), so the measured error
// is the kernel's own. Device outputs are poisoned with NaN first, so an element a
// kernel forgets to write fails the test.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tachyon::cuda_test {

#define TACHYON_REQUIRE_GPU()                                                  \
  do {                                                                         \
    if (::tachyon::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

inline std::string dtype_label(DType t) {
  return std::string(dtype_name(t));
}

// Normalised error bound for outputs stored in `t` (f32 accumulation inside).
inline double bound_for(DType t) {
  switch (t) {
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

// kv_fp8: the KV cache in e4m3 (bf16 and f16 compute).
inline std::unique_ptr<cuda::CudaBackend> make_gpu(DType dtype, bool kv_fp8 = false) {
  CudaBackendOptions o;
  o.dtype = dtype;
  if (kv_fp8) o.kv_dtype = DType::kF8E4M3;
  return std::make_unique<cuda::CudaBackend>(o);
}

inline std::unique_ptr<cuda::CudaBackend> make_gpu_kv(DType dtype, DType kv_dtype) {
  CudaBackendOptions o;
  o.dtype = dtype;
  o.kv_dtype = kv_dtype;
  return std::make_unique<cuda::CudaBackend>(o);
}

// Every element rounded to e4m3 (what an fp8 KV cache keeps of it), in f32.
inline Tensor e4m3_rounded(const Tensor& t) {
  Tensor r = t.clone();
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) p[i] = e4m3_to_f32(f32_to_e4m3(p[i]));
  return r;
}

// normal(mean, stddev) values in f32.
inline Tensor randn(const Shape& shape, std::mt19937& rng, float stddev = 1.f, float mean = 0.f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> d(mean, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// The f32 tensor rounded through `dtype` (the values the device will see).
inline Tensor rounded(const Tensor& f32, DType dtype) {
  if (dtype == DType::kF32) return f32.clone();
  return f32.to(dtype).to(DType::kF32);
}

// A device copy of an f32 host tensor stored in `dtype`.
inline Tensor to_gpu(cuda::CudaBackend& gpu, const Tensor& f32, DType dtype) {
  Tensor h = dtype == DType::kF32 ? f32 : f32.to(dtype);
  return gpu.upload(h.raw(), h.shape(), dtype, {});
}

inline Tensor to_gpu_i32(cuda::CudaBackend& gpu, const std::vector<int32_t>& v) {
  return gpu.upload(v.data(), {static_cast<int64_t>(v.size())}, DType::kI32, {});
}

// Fills a device tensor with NaN (all-ones bytes) on the backend's stream.
inline void poison(cuda::CudaBackend& gpu, Tensor& t) {
  TACHYON_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0xff, t.nbytes(), gpu.stream()));
}

// A device tensor of `shape` in `dtype`, poisoned.
inline Tensor poisoned(cuda::CudaBackend& gpu, const Shape& shape, DType dtype) {
  Tensor t = gpu.alloc(shape, dtype);
  poison(gpu, t);
  return t;
}

inline std::vector<double> host_values(cuda::CudaBackend& gpu, const Tensor& t) {
  Tensor h = gpu.to_host(t);
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i)
    v[static_cast<size_t>(i)] = load_as_f32(h.raw(), h.dtype(), static_cast<size_t>(i));
  return v;
}

inline std::vector<double> host_values(const Tensor& h) {
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i)
    v[static_cast<size_t>(i)] = load_as_f32(h.raw(), h.dtype(), static_cast<size_t>(i));
  return v;
}

struct ErrorReport {
  double normalised = 0;    // ||got - want|| / ||want||
  double worst_scaled = 0;  // max |got - want| / (|want| + rms(want))
  int64_t worst_at = -1;
  bool nan = false;
};

inline ErrorReport measure(const std::vector<double>& got, const std::vector<double>& want) {
  ErrorReport r;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  const double rms = want.empty() ? 0 : std::sqrt(den / static_cast<double>(want.size()));
  r.normalised = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) || std::isinf(got[i])) {
      r.nan = true;
      r.worst_at = static_cast<int64_t>(i);
      break;
    }
    const double s = std::abs(got[i] - want[i]) / (std::abs(want[i]) + rms + 1e-30);
    if (s > r.worst_scaled) {
      r.worst_scaled = s;
      r.worst_at = static_cast<int64_t>(i);
    }
  }
  return r;
}

// Holds got to want: normalised error <= bound and every element within
// 4 * bound * (|want| + rms(want)); no NaN. Prints the measured errors.
inline void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                        double bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const ErrorReport r = measure(got, want);
  std::printf("  %-48s normalised %.2e  worst %.2e  (bound %.0e)\n", what.c_str(), r.normalised,
              r.worst_scaled, bound);
  EXPECT_FALSE(r.nan) << what << ": NaN/inf at element " << r.worst_at;
  EXPECT_LE(r.normalised, bound) << what;
  EXPECT_LE(r.worst_scaled, 4 * bound)
      << what << ": element " << r.worst_at << " got " << got[static_cast<size_t>(r.worst_at)]
      << " want " << want[static_cast<size_t>(r.worst_at)];
}

}  // namespace tachyon::cuda_test
