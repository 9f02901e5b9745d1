#include "backend/cpu/gemm.h"

#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {

// Portable reference path: one output column block per task, weights converted a row
// at a time.
void gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
              int64_t n, const float* bias, float* y, int64_t ldy, ThreadPool* pool) {
  TACHYON_CHECK(w_dtype == DType::kF32 || w_dtype == DType::kF16 || w_dtype == DType::kBF16,
                "gemm weight dtype {}", dtype_name(w_dtype));
  ThreadPool& tp = pool != nullptr ? *pool : ThreadPool::global();
  tp.parallel_for(0, n, 16, [&](int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = n0; j < n1; ++j) {
      for (int64_t p = 0; p < k; ++p)
        row[p] = load_as_f32(w, w_dtype, static_cast<size_t>(j * k + p));
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        float acc = 0.f;
        for (int64_t p = 0; p < k; ++p) acc += xi[p] * row[p];
        y[i * ldy + j] = acc + (bias != nullptr ? bias[j] : 0.f);
      }
    }
  });
}

}  // namespace tachyon::cpu
