// Dense matrix products for the CUDA backend through cuBLASLt, with the bias and ReLU
// fused into the epilogue where cuBLASLt offers it. A plan (descriptors + algorithm)
// is cached per shape, dtypes, strides and alignments; shapes cuBLASLt finds no
// algorithm for go through cublasGemmEx.
//
// Algorithm choice: cuBLASLt's heuristic proposes up to kTuneCandidates algorithms; the
// first time a shape family is seen outside graph capture (m bucketed, see tune_rows),
// each candidate is timed on the actual product, every run after an L2 flush (weights
// stream from memory in a real step), and the fastest is kept for the family (the
// heuristic's first choice is often 1.5-3x slower at decode-sized m).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"

namespace tachyon::cuda {

struct GemmArgs {
  // y[m, n] (row stride ldy) = x[m, k] · w[n, k]ᵀ (+ bias[n]) (then ReLU when relu);
  // with accumulate, y[m, n] + x · wᵀ (+ bias), rounded once.
  int64_t m = 0, n = 0, k = 0;
  const void* x = nullptr;
  DType x_type = DType::kBF16;
  const void* w = nullptr;
  DType w_type = DType::kBF16;
  void* y = nullptr;
  DType y_type = DType::kBF16;
  int64_t ldy = 0;
  const void* bias = nullptr;  // in y_type
  bool relu = false;
  bool accumulate = false;  // y += the product (beta = 1): y is read, then written
};

class Gemm {
 public:
  Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Returns false when the epilogue could not be fused: the product was computed
  // without bias and ReLU, which the caller must then apply.
  bool run(const GemmArgs& a);

  size_t num_plans() const { return plans_.size(); }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;     // cuBLASLt has an algorithm for it
    bool fused = false;  // with the epilogue
  };
  using Key =
      std::tuple<int64_t, int64_t, int64_t, int, int, int, int64_t, int, int, int, int, int>;
  // The m a shape family is tuned at: products whose m falls into one bucket share the
  // tuned algorithm (when cuBLASLt accepts it for their exact shape).
  static int64_t tune_rows(int64_t m);
  static constexpr int kTuneCandidates = 16;
  static bool wants_fused(const GemmArgs& a);
  Key key_for(const GemmArgs& a, int64_t m) const;
  Plan& plan_for(const GemmArgs& a);
  Plan make_plan(const GemmArgs& a, bool with_epilogue, const Key& family);
  // Times each algorithm (after an L2 flush) and returns the fastest one's index.
  int pick_fastest(const Plan& p, const GemmArgs& a, const cublasLtMatmulHeuristicResult_t* r,
                   int count);
  cublasStatus_t matmul(const Plan& p, const cublasLtMatmulAlgo_t& algo, const GemmArgs& a);
  void fallback(const GemmArgs& a);

  cudaStream_t stream_;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Plan> plans_;
  // Tuned algorithm per shape family (Key with m = tune_rows(m)).
  std::map<Key, cublasLtMatmulAlgo_t> tuned_;
  // > L2: written before each timed run. Held for the backend's lifetime (2 x L2, about
  // 100 MB on an H200, allocated before the KV cache is sized): a new shape family can be
  // tuned at any step, and freeing it in between would synchronise the device each time.
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
  cudaEvent_t ev0_ = nullptr, ev1_ = nullptr;
};

}  // namespace tachyon::cuda
