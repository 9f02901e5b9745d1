#include "backend/cuda/gemm.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tachyon::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      raise<InvalidArgument>("GEMM on {} is not supported", dtype_name(t));
  }
}

// The largest power of two (at most 256) that divides the address.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  TACHYON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

}  // namespace

Gemm::Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  TACHYON_CUBLAS_CHECK(cublasLtCreate(&lt_));
  TACHYON_CUBLAS_CHECK(cublasCreate(&blas_));
  TACHYON_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  TACHYON_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  int dev = 0, l2 = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&dev));
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  flush_bytes_ = std::max<size_t>(size_t{2} * static_cast<size_t>(l2), size_t{8} << 20);
  if (cudaMalloc(&flush_, flush_bytes_) != cudaSuccess) {
    cudaGetLastError();
    flush_ = nullptr;  // tuned without flushing
  }
  TACHYON_CUDA_CHECK(cudaEventCreate(&ev0_));
  TACHYON_CUDA_CHECK(cudaEventCreate(&ev1_));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c != nullptr) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
  }
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (flush_ != nullptr) cudaFree(flush_);
  if (ev0_ != nullptr) cudaEventDestroy(ev0_);
  if (ev1_ != nullptr) cudaEventDestroy(ev1_);
}

int64_t Gemm::tune_rows(int64_t m) {
  if (m <= 16) {
    int64_t b = 1;
    while (b < m) b *= 2;
    return b;
  }
  if (m <= 256) return (m + 15) / 16 * 16;
  if (m <= 2048) return (m + 127) / 128 * 128;
  return (m + 1023) / 1024 * 1024;
}

cublasStatus_t Gemm::matmul(const Plan& p, const cublasLtMatmulAlgo_t& algo, const GemmArgs& a) {
  const float alpha = 1.f, beta = a.accumulate ? 1.f : 0.f;
  return cublasLtMatmul(lt_, p.desc, &alpha, a.w, p.a, a.x, p.b, &beta, a.y, p.c, a.y, p.c, &algo,
                        workspace_, workspace_bytes_, stream_);
}

int Gemm::pick_fastest(const Plan& p, const GemmArgs& args,
                       const cublasLtMatmulHeuristicResult_t* r, int count) {
  constexpr int kReps = 3;
  // An accumulating product is timed into a scratch output (stream-ordered allocation:
  // no device synchronisation), or each timed run would add into y again.
  GemmArgs a = args;
  void* scratch = nullptr;
  if (args.accumulate) {
    const size_t bytes =
        static_cast<size_t>(a.m) * static_cast<size_t>(a.ldy) * dtype_size(a.y_type);
    TACHYON_CUDA_CHECK(cudaMallocAsync(&scratch, bytes, stream_));
    a.y = scratch;
    a.accumulate = false;
  }
  std::vector<float> best(static_cast<size_t>(count), 0.f);
  for (int i = 0; i < count; ++i) {
    std::vector<float> t;
    for (int rep = 0; rep <= kReps; ++rep) {  // rep 0 warms up
      if (flush_ != nullptr)
        TACHYON_CUDA_CHECK(cudaMemsetAsync(flush_, rep & 0xff, flush_bytes_, stream_));
      TACHYON_CUDA_CHECK(cudaEventRecord(ev0_, stream_));
      const cublasStatus_t st = matmul(p, r[i].algo, a);
      TACHYON_CUDA_CHECK(cudaEventRecord(ev1_, stream_));
      TACHYON_CUDA_CHECK(cudaEventSynchronize(ev1_));
      if (st != CUBLAS_STATUS_SUCCESS) {
        t.clear();
        break;
      }
      float ms = 0.f;
      TACHYON_CUDA_CHECK(cudaEventElapsedTime(&ms, ev0_, ev1_));
      if (rep > 0) t.push_back(ms);
    }
    if (t.empty()) {
      best[i] = -1.f;
      continue;
    }
    std::sort(t.begin(), t.end());
    best[i] = t[t.size() / 2];
  }
  if (scratch != nullptr) TACHYON_CUDA_CHECK(cudaFreeAsync(scratch, stream_));
  int pick = 0;
  for (int i = 0; i < count; ++i)
    if (best[i] >= 0.f && (best[pick] < 0.f || best[i] < best[pick])) pick = i;
  return pick;
}

Gemm::Plan Gemm::make_plan(const GemmArgs& a, bool with_epilogue, const Key& family) {
  Plan p;
  TACHYON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
  if (with_epilogue) {
    if (a.bias != nullptr)
      ep = a.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (a.relu)
      ep = CUBLASLT_EPILOGUE_RELU;
  }
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, ep);
  if (ep == CUBLASLT_EPILOGUE_BIAS || ep == CUBLASLT_EPILOGUE_RELU_BIAS)
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, a.bias);
  // Column-major view of the row-major product: yᵀ [n, m] = w [k, n]ᵀ · xᵀ [k, m].
  TACHYON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &p.a, cuda_type(a.w_type), static_cast<uint64_t>(a.k), static_cast<uint64_t>(a.n), a.k));
  TACHYON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &p.b, cuda_type(a.x_type), static_cast<uint64_t>(a.k), static_cast<uint64_t>(a.m), a.k));
  TACHYON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &p.c, cuda_type(a.y_type), static_cast<uint64_t>(a.n), static_cast<uint64_t>(a.m), a.ldy));
  p.fused = with_epilogue;
  // A family's tuned algorithm, when cuBLASLt accepts it for this exact shape.
  if (auto it = tuned_.find(family); it != tuned_.end()) {
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(lt_, p.desc, p.a, p.b, p.c, p.c, &it->second, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= workspace_bytes_) {
      p.algo = it->second;
      p.ok = true;
      return p;
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = alignment(a.w), al_b = alignment(a.x), al_c = alignment(a.y);
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref,
                                                           kTuneCandidates, results, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && count > 0;
  if (!p.ok) return p;
  int pick = 0;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TACHYON_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  // Tuning runs products: not while a graph is being recorded (the family is then tuned
  // the next time it runs eagerly).
  if (count > 1 && capture == cudaStreamCaptureStatusNone) {
    pick = pick_fastest(p, a, results, count);
    tuned_[family] = results[pick].algo;
  }
  p.algo = results[pick].algo;
  return p;
}

// Whether the epilogue (bias and/or ReLU) can go to cuBLASLt: a bias must be 16-byte
// aligned; otherwise the caller applies both.
bool Gemm::wants_fused(const GemmArgs& a) {
  const bool any = a.bias != nullptr || a.relu;
  return any && (a.bias == nullptr || alignment(a.bias) >= 16);
}

Gemm::Key Gemm::key_for(const GemmArgs& a, int64_t m) const {
  const bool fuse = wants_fused(a);
  return Key{m,
             a.n,
             a.k,
             static_cast<int>(a.x_type),
             static_cast<int>(a.w_type),
             static_cast<int>(a.y_type),
             a.ldy,
             fuse ? 1 + (a.bias != nullptr ? 1 : 0) : 0,
             fuse && a.relu ? 1 : 0,
             static_cast<int>(alignment(a.x)),
             static_cast<int>(alignment(a.w)),
             static_cast<int>(alignment(a.y))};
}

Gemm::Plan& Gemm::plan_for(const GemmArgs& a) {
  const bool fuse = wants_fused(a);
  const Key key = key_for(a, a.m);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const Key family = key_for(a, tune_rows(a.m));
  Plan p = make_plan(a, fuse, family);
  if (fuse && !p.ok) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
    GemmArgs plain = a;
    plain.bias = nullptr;
    plain.relu = false;
    p = make_plan(a, false, key_for(plain, tune_rows(a.m)));
  }
  return plans_.emplace(key, p).first->second;
}

bool Gemm::run(const GemmArgs& a) {
  const bool wants_epilogue = a.bias != nullptr || a.relu;
  if (a.m == 0 || a.n == 0) return true;
  TACHYON_CHECK(a.m <= INT_MAX && a.n <= INT_MAX && a.k <= INT_MAX && a.ldy <= INT_MAX,
                "GEMM {}x{}x{} too large", a.m, a.n, a.k);
  Plan& p = plan_for(a);
  if (!p.ok) {
    fallback(a);
    return !wants_epilogue;
  }
  if (p.fused && a.bias != nullptr) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, a.bias);
  TACHYON_CUBLAS_CHECK(matmul(p, p.algo, a));
  return !wants_epilogue || p.fused;
}

void Gemm::fallback(const GemmArgs& a) {
  const float alpha = 1.f, beta = a.accumulate ? 1.f : 0.f;
  TACHYON_CUBLAS_CHECK(
      cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(a.n), static_cast<int>(a.m),
                   static_cast<int>(a.k), &alpha, a.w, cuda_type(a.w_type), static_cast<int>(a.k),
                   a.x, cuda_type(a.x_type), static_cast<int>(a.k), &beta, a.y, cuda_type(a.y_type),
                   static_cast<int>(a.ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tachyon::cuda
