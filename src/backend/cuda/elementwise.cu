// Elementwise and row-wise ops on activations: bias + activation (the GEMM epilogue
// when cuBLASLt cannot fuse it), gated activations, add, softcap, clamp, row gather
// and the sigmoid-gated accumulate. f32 arithmetic whatever the storage dtype.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tachyon::cuda {
namespace {

unsigned grid_for(int64_t n, int threads = 256) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, threads), 65536)));
}

#define TACHYON_GRID_STRIDE(i, n)                                           \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// Row-wise kernels take a 2-d grid: y over rows (striding past 65535), x over columns,
// so no thread divides a 64-bit index.
constexpr int kRowThreads = 256;

dim3 row_grid(int64_t rows, int64_t col_items) {
  return dim3(static_cast<unsigned>(std::min<int64_t>(ceil_div(col_items, kRowThreads), 4096)),
              static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rows, 65535))));
}

#define TACHYON_ROWS_COLS(r, c, rows, cols)                                      \
  for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)                       \
    for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < (cols); \
         c += int64_t{gridDim.x} * blockDim.x)

template <typename T>
__global__ void bias_act_kernel(T* y, int64_t ld, int64_t rows, int64_t cols,
                                const float* __restrict__ bias, KAct act) {
  pdl_wait();
  pdl_launch_dependents();
  TACHYON_ROWS_COLS(r, c, rows, cols) {
    T* p = y + r * ld + c;
    float v = to_f(*p);
    if (bias != nullptr) v += bias[c];
    *p = from_f<T>(apply_act(v, act));
  }
}

// The activation's output is rounded to the storage dtype before the product, as
// frameworks computing in that dtype do.
template <typename T>
__device__ __forceinline__ T gate(T g, T u, KAct act) {
  return from_f<T>(round_to<T>(apply_act(to_f(g), act)) * to_f(u));
}

template <typename T>
__global__ void gated_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows,
                             int64_t inter, KAct act) {
  pdl_wait();
  pdl_launch_dependents();
  TACHYON_ROWS_COLS(r, c, rows, inter) {
    const T* row = in + r * 2 * inter;
    out[r * inter + c] = gate(row[c], row[inter + c], act);
  }
}

// 16 bytes of gate, of up and of output per thread (inter a multiple of the vector,
// rows 16-byte aligned).
template <typename T>
__global__ void gated_vec_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows,
                                 int64_t inter, KAct act) {
  constexpr int kVec = 16 / sizeof(T);
  pdl_wait();
  pdl_launch_dependents();
  const int64_t vecs = inter / kVec;
  TACHYON_ROWS_COLS(r, c, rows, vecs) {
    const uint4* g = reinterpret_cast<const uint4*>(in + r * 2 * inter);
    const uint4 gv = g[c], uv = g[vecs + c];
    uint4 ov;
    const T* ge = reinterpret_cast<const T*>(&gv);
    const T* ue = reinterpret_cast<const T*>(&uv);
    T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
    for (int i = 0; i < kVec; ++i) oe[i] = gate(ge[i], ue[i], act);
    reinterpret_cast<uint4*>(out + r * inter)[c] = ov;
  }
}

template <typename T>
__global__ void scale_add_kernel(const T* a, float scale, const T* b, T* out, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  TACHYON_GRID_STRIDE(i, n) out[i] = from_f<T>(fmaf(scale, to_f(a[i]), to_f(b[i])));
}

template <typename T>
__global__ void softcap_kernel(T* x, int64_t n, float cap) {
  TACHYON_GRID_STRIDE(i, n) x[i] = from_f<T>(cap * tanhf(to_f(x[i]) / cap));
}

template <typename T>
__global__ void clamp_kernel(T* x, int64_t n, float limit) {
  TACHYON_GRID_STRIDE(i, n) x[i] = from_f<T>(fminf(limit, fmaxf(-limit, to_f(x[i]))));
}

template <typename T>
__global__ void gather_rows_kernel(const T* __restrict__ src, int64_t src_rows, int64_t cols,
                                   const int32_t* __restrict__ rows, int64_t n, T* __restrict__ out,
                                   int* err) {
  pdl_wait();
  pdl_launch_dependents();
  TACHYON_GRID_STRIDE(i, n * cols) {
    const int64_t r = i / cols, c = i % cols;
    const int32_t s = rows[r];
    if (s < 0 || s >= src_rows) {
      if (c == 0) report(err, kErrGatherRow);
      out[i] = from_f<T>(0.f);
      continue;
    }
    out[i] = src[int64_t{s} * cols + c];
  }
}

template <typename T>
__global__ void add_sigmoid_gated_kernel(const T* __restrict__ src, const T* __restrict__ gate,
                                         int64_t rows, int64_t cols, T* out) {
  TACHYON_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols;
    const float g = 1.f / (1.f + expf(-to_f(gate[r])));
    out[i] = from_f<T>(to_f(out[i]) + g * to_f(src[i]));
  }
}

}  // namespace

void launch_bias_act(void* y, DType type, int64_t ld, int64_t rows, int64_t cols, const float* bias,
                     KAct act, cudaStream_t stream) {
  if (rows * cols == 0 || (bias == nullptr && act == KAct::kIdentity)) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    launch_kernel(bias_act_kernel<T>, row_grid(rows, cols), dim3(kRowThreads), 0, stream,
                  static_cast<T*>(y), ld, rows, cols, bias, act);
  });
}

void launch_gated(const void* in, void* out, DType type, int64_t rows, int64_t inter, KAct act,
                  cudaStream_t stream) {
  if (rows * inter == 0) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    constexpr int64_t kVec = 16 / sizeof(T);
    const bool vec = inter % kVec == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 16 == 0;
    if (vec)
      launch_kernel(gated_vec_kernel<T>, row_grid(rows, inter / kVec), dim3(kRowThreads), 0, stream,
                    static_cast<const T*>(in), static_cast<T*>(out), rows, inter, act);
    else
      launch_kernel(gated_kernel<T>, row_grid(rows, inter), dim3(kRowThreads), 0, stream,
                    static_cast<const T*>(in), static_cast<T*>(out), rows, inter, act);
  });
}

void launch_scale_add(const void* a, float scale, const void* b, void* out, DType type, int64_t n,
                      cudaStream_t stream) {
  if (n == 0) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    launch_kernel(scale_add_kernel<T>, dim3(grid_for(n)), dim3(256), 0, stream,
                  static_cast<const T*>(a), scale, static_cast<const T*>(b), static_cast<T*>(out),
                  n);
  });
}

void launch_softcap(void* x, DType type, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return;
  TACHYON_DISPATCH_FLOAT(
      type, T, { softcap_kernel<T><<<grid_for(n), 256, 0, stream>>>(static_cast<T*>(x), n, cap); });
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_clamp(void* x, DType type, int64_t n, float limit, cudaStream_t stream) {
  if (n == 0) return;
  TACHYON_DISPATCH_FLOAT(
      type, T, { clamp_kernel<T><<<grid_for(n), 256, 0, stream>>>(static_cast<T*>(x), n, limit); });
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_gather_rows(const void* src, DType type, int64_t src_rows, int64_t cols,
                        const int32_t* rows, int64_t n, void* out, int* err, cudaStream_t stream) {
  if (n * cols == 0) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    launch_kernel(gather_rows_kernel<T>, dim3(grid_for(n * cols)), dim3(256), 0, stream,
                  static_cast<const T*>(src), src_rows, cols, rows, n, static_cast<T*>(out), err);
  });
}

template <typename T>
__global__ void scatter_rows_kernel(const float* __restrict__ src, int64_t n, int64_t cols,
                                    const int32_t* __restrict__ rows, T* __restrict__ out,
                                    int64_t out_rows) {
  pdl_wait();
  pdl_launch_dependents();
  TACHYON_GRID_STRIDE(i, n * cols) {
    const int64_t r = i / cols, c = i % cols;
    const int32_t d = rows[r];
    if (d < 0 || d >= out_rows) continue;
    out[int64_t{d} * cols + c] = from_f<T>(src[i]);
  }
}

void launch_scatter_rows(const float* src, int64_t n, int64_t cols, const int32_t* rows, void* out,
                         DType type, int64_t out_rows, cudaStream_t stream) {
  if (n * cols == 0) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    launch_kernel(scatter_rows_kernel<T>, dim3(grid_for(n * cols)), dim3(256), 0, stream, src, n,
                  cols, rows, static_cast<T*>(out), out_rows);
  });
}

__global__ void scatter_ids_kernel(const int32_t* __restrict__ src, int64_t src_n,
                                   const int32_t* __restrict__ pairs, int64_t n_pairs,
                                   int32_t* __restrict__ ids, int64_t n_ids) {
  pdl_wait();
  pdl_launch_dependents();
  TACHYON_GRID_STRIDE(j, n_pairs) {
    const int32_t dst = pairs[2 * j], from = pairs[2 * j + 1];
    if (dst < 0 || dst >= n_ids || from < 0 || from >= src_n) continue;
    const int32_t t = src[from];
    ids[dst] = t >= 0 ? t : 0;
  }
}

void launch_scatter_ids(const int32_t* src, int64_t src_n, const int32_t* pairs, int64_t n_pairs,
                        int32_t* ids, int64_t n_ids, cudaStream_t stream) {
  if (n_pairs == 0) return;
  launch_kernel(scatter_ids_kernel, dim3(grid_for(n_pairs)), dim3(256), 0, stream, src, src_n,
                pairs, n_pairs, ids, n_ids);
}

template <typename T>
__global__ void scale_rows_kernel(T* x, int64_t rows, int64_t cols, int64_t ld,
                                  const float* __restrict__ factors) {
  TACHYON_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    T* p = x + r * ld + c;
    *p = from_f<T>(to_f(*p) * factors[r]);
  }
}

void launch_scale_rows(void* x, DType type, int64_t rows, int64_t cols, int64_t ld,
                       const float* factors, cudaStream_t stream) {
  if (rows * cols == 0) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    scale_rows_kernel<T>
        <<<grid_for(rows * cols), 256, 0, stream>>>(static_cast<T*>(x), rows, cols, ld, factors);
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

void launch_add_sigmoid_gated(const void* src, const void* gate, DType type, int64_t rows,
                              int64_t cols, void* out, cudaStream_t stream) {
  if (rows * cols == 0) return;
  TACHYON_DISPATCH_FLOAT(type, T, {
    add_sigmoid_gated_kernel<T><<<grid_for(rows * cols), 256, 0, stream>>>(
        static_cast<const T*>(src), static_cast<const T*>(gate), rows, cols, static_cast<T*>(out));
  });
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
