// Checks the GPU benchmarks make beside their timings: a bf16 device tensor's values on
// the host, the normalised error of one output against another, and the median of
// timings. Shared by tachyon_kernel_bench and tachyon_overlap_bench.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tachyon::bench {

inline std::vector<float> bf16_values(cuda::CudaBackend& be, const Tensor& t) {
  Tensor h = be.to_host(t);
  std::vector<float> v(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) v[i] = bf16_to_f32(bf16{h.data<uint16_t>()[i]});
  return v;
}

// ||a - ref|| / ||ref|| (infinite when a holds a NaN or an infinity).
inline double rel_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace tachyon::bench
