// gemm_xwt: argument checks, run-time choice of the instruction set, and the blocking
// and threading around the per-ISA kernels of gemm_kernels.h.
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/settings.h"
#include "core/thread_pool.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace tachyon::cpu {
namespace {

struct CpuFeatures {
  bool avx2 = false;    // AVX2 + FMA + F16C, with OS support for ymm state
  bool avx512 = false;  // AVX-512 F/BW/VL/DQ, with OS support for zmm state
};

CpuFeatures detect_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1,
             f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return f;
  uint32_t xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool os_ymm = (xcr0_lo & 0x6) == 0x6;
  const bool os_zmm = (xcr0_lo & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1,
             avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
  f.avx2 = os_ymm && avx2 && fma && f16c;
  f.avx512 = f.avx2 && os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
#endif
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = detect_features();
  return f;
}

CpuIsa best_isa() {
  if (features().avx512) return CpuIsa::kAvx512;
  if (features().avx2) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
}

CpuIsa choose_isa() {
  CpuIsa isa = best_isa();
  const std::optional<std::string> env = setting_env("cpu-isa");
  if (!env) return isa;
  auto want = parse_cpu_isa(*env);
  if (!want) {
    log_warning("TACHYON_CPU_ISA={} is not one of portable, avx2, avx512; using {}", *env,
                cpu_isa_name(isa));
    return isa;
  }
  if (*want > isa) {
    log_warning("TACHYON_CPU_ISA={}: this CPU cannot run it; using {}", *env, cpu_isa_name(isa));
    return isa;
  }
  return *want;
}

void check_args(const float* x, int64_t m, int64_t k, int64_t ldx,
                std::span<const GemmWeight> weights) {
  TACHYON_CHECK(m >= 0 && k >= 0, "gemm shape m={} k={}", m, k);
  TACHYON_CHECK(m == 0 || ((k == 0 || x != nullptr) && ldx >= k), "gemm x={} ldx={} k={}",
                static_cast<const void*>(x), ldx, k);
  for (const GemmWeight& e : weights) {
    TACHYON_CHECK(e.dtype == DType::kF32 || e.dtype == DType::kF16 || e.dtype == DType::kBF16,
                  "gemm weight dtype {}", dtype_name(e.dtype));
    TACHYON_CHECK(e.n >= 0, "gemm n={}", e.n);
    TACHYON_CHECK(e.n == 0 || k == 0 || e.w != nullptr, "gemm null weights");
    TACHYON_CHECK(m == 0 || e.n == 0 || (e.y != nullptr && e.ldy >= e.n), "gemm y={} ldy={} n={}",
                  static_cast<const void*>(e.y), e.ldy, e.n);
  }
}

// Column blocks of every entry, numbered consecutively: block b of the whole job is
// block (b - first[e]) of entry e.
struct Blocks {
  std::span<const GemmWeight> weights;
  int64_t block;  // columns per block
  int64_t total = 0;

  Blocks(std::span<const GemmWeight> w, int64_t columns) : weights(w), block(columns) {
    for (const GemmWeight& e : weights) total += (e.n + block - 1) / block;
  }
  // Entry index and column range of block b.
  void find(int64_t b, size_t& e, int64_t& j0, int64_t& j1) const {
    for (e = 0; e < weights.size(); ++e) {
      const int64_t count = (weights[e].n + block - 1) / block;
      if (b < count) break;
      b -= count;
    }
    j0 = b * block;
    j1 = std::min(weights[e].n, j0 + block);
  }
};

void run_gemv(const detail::GemmKernels& kern, const float* x, int64_t m, int64_t k, int64_t ldx,
              std::span<const GemmWeight> weights, int64_t total_n, ThreadPool& pool) {
  // A few blocks per thread so that a thread slowed by other work is helped out; at
  // least 16 rows per block so that each streams a long contiguous run of weights.
  const int64_t threads = pool.num_threads();
  int64_t rows = (total_n + threads * 4 - 1) / (threads * 4);
  rows = std::max<int64_t>(16, (rows + 15) / 16 * 16);
  Blocks blocks(weights, rows);
  pool.run(blocks.total, [&](int64_t b) {
    size_t e;
    int64_t j0, j1;
    blocks.find(b, e, j0, j1);
    const GemmWeight& w = weights[e];
    kern.gemv(x, m, k, ldx, w.w, w.dtype, j0, j1, w.bias, w.y, w.ldy);
  });
}

// Packed x: block ib of mr rows starts at xp + ib * stride ([k][mr] floats).
struct PackedX {
  const float* data;
  int64_t stride;
};

// One block: rows [i0, i1) of x (i0 a multiple of mr) against weight rows [j0, j1).
void gemm_block(const detail::GemmKernels& kern, const PackedX& xp, int64_t i0, int64_t i1,
                int64_t k, const GemmWeight& w, int64_t j0, int64_t j1) {
  const int64_t mr = kern.mr, nr = kern.nr, kc = kern.kc;
  const int64_t panels = (j1 - j0 + nr - 1) / nr;
  float* panel = detail::task_scratch(static_cast<size_t>(panels * kc * nr));
  for (int64_t p0 = 0; p0 < k; p0 += kc) {
    const int64_t kcb = std::min(kc, k - p0);
    const bool last = p0 + kcb == k;
    for (int64_t s = 0; s < panels; ++s) {
      const int64_t jj = j0 + s * nr;
      kern.pack_w(w.w, w.dtype, k, jj, std::min(nr, j1 - jj), p0, kcb, panel + s * kc * nr);
    }
    // A block of x (mr x kcb) stays in L1 while it meets every panel in turn.
    for (int64_t i = i0; i < i1; i += mr) {
      const int rows = static_cast<int>(std::min(mr, i1 - i));
      const float* xi = xp.data + (i / mr) * xp.stride + p0 * mr;
      for (int64_t s = 0; s < panels; ++s) {
        const int64_t jj = j0 + s * nr;
        const float* bias = last && w.bias != nullptr ? w.bias + jj : nullptr;
        detail::micro_cols(kern, rows, xi, panel + s * kc * nr, kcb, w.y + i * w.ldy + jj, w.ldy,
                           std::min(nr, j1 - jj), p0 > 0, bias);
      }
    }
  }
}

constexpr int64_t kNc = 128;  // weight rows per GEMM block (a multiple of every nr)

// Rows of x in one pass (rounded up to a multiple of mr): bounds the packed copy of x
// (and keeps it cache-sized) at the price of converting the weights once per pass.
constexpr int64_t kMChunk = 512;

// The GEMM of up to about kMChunk rows: pack x, then blocks of columns over the threads.
void run_gemm_rows(const detail::GemmKernels& kern, const float* x, int64_t m, int64_t k,
                   int64_t ldx, std::span<const GemmWeight> weights, ThreadPool& pool) {
  const int64_t mr = kern.mr;
  const int64_t mblocks = (m + mr - 1) / mr;
  const int64_t stride = detail::packed_x_stride(kern, k);
  float* xbuf = detail::caller_scratch(static_cast<size_t>(mblocks * stride));
  detail::pack_x_blocks(kern, x, m, k, ldx, xbuf, stride, pool);
  const PackedX xp{xbuf, stride};

  Blocks blocks(weights, kNc);
  // Few column blocks (small n): split the rows too, so every thread has work.
  const int64_t threads = pool.num_threads();
  int64_t row_parts = 1;
  if (blocks.total < threads * 2) {
    row_parts = std::min<int64_t>((threads * 2 + blocks.total - 1) / blocks.total, mblocks);
  }
  const int64_t rows = (mblocks + row_parts - 1) / row_parts * mr;
  row_parts = (m + rows - 1) / rows;
  pool.run(blocks.total * row_parts, [&](int64_t t) {
    size_t e;
    int64_t j0, j1;
    blocks.find(t / row_parts, e, j0, j1);
    const int64_t i0 = (t % row_parts) * rows;
    gemm_block(kern, xp, i0, std::min(m, i0 + rows), k, weights[e], j0, j1);
  });
}

// fn(x rows, row count, entries with y moved to those rows) for passes of about kMChunk
// rows: bounds the packed copy of x at the price of reading the weights once per pass.
template <typename Fn>
void for_row_chunks(const detail::GemmKernels& kern, const float* x, int64_t m, int64_t ldx,
                    std::span<const GemmWeight> weights, Fn&& fn) {
  const int64_t chunk = (kMChunk + kern.mr - 1) / kern.mr * kern.mr;
  if (m <= chunk) return fn(x, m, weights);
  std::vector<GemmWeight> part(weights.begin(), weights.end());
  for (int64_t c0 = 0; c0 < m; c0 += chunk) {
    for (size_t e = 0; e < part.size(); ++e) part[e].y = weights[e].y + c0 * weights[e].ldy;
    fn(x + c0 * ldx, std::min(chunk, m - c0), std::span<const GemmWeight>(part));
  }
}

// Entries all of one kind (packed or not).
void run_uniform(const detail::GemmKernels& kern, const float* x, int64_t m, int64_t k, int64_t ldx,
                 std::span<const GemmWeight> weights, ThreadPool& pool) {
  int64_t total_n = 0;
  for (const GemmWeight& e : weights) total_n += e.n;
  if (total_n == 0) return;
  if (weights.front().packed) {
    for_row_chunks(kern, x, m, ldx, weights,
                   [&](const float* xc, int64_t mc, std::span<const GemmWeight> part) {
                     detail::run_packed(kern, xc, mc, k, ldx, part, pool);
                   });
  } else if (m <= kern.gemv_max_m) {
    run_gemv(kern, x, m, k, ldx, weights, total_n, pool);
  } else {
    for_row_chunks(kern, x, m, ldx, weights,
                   [&](const float* xc, int64_t mc, std::span<const GemmWeight> part) {
                     run_gemm_rows(kern, xc, mc, k, ldx, part, pool);
                   });
  }
}

void run(CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx,
         std::span<const GemmWeight> weights, ThreadPool* pool) {
  check_args(x, m, k, ldx, weights);
  if (m == 0 || weights.empty()) return;
  if (k == 0) {
    for (const GemmWeight& e : weights) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < e.n; ++j) e.y[i * e.ldy + j] = e.bias ? e.bias[j] : 0.f;
      }
    }
    return;
  }
  const detail::GemmKernels& kern = detail::kernels_for(isa);
  ThreadPool& tp = pool != nullptr ? *pool : ThreadPool::global();
  const bool mixed = std::any_of(weights.begin(), weights.end(), [&](const GemmWeight& e) {
    return e.packed != weights.front().packed;
  });
  if (!mixed) return run_uniform(kern, x, m, k, ldx, weights, tp);
  std::vector<GemmWeight> packed, plain;
  for (const GemmWeight& e : weights) (e.packed ? packed : plain).push_back(e);
  run_uniform(kern, x, m, k, ldx, packed, tp);
  run_uniform(kern, x, m, k, ldx, plain, tp);
}

void require_supported(CpuIsa isa) {
  if (!cpu_isa_supported(isa)) {
    raise<InvalidArgument>("this CPU cannot run the {} GEMM path", cpu_isa_name(isa));
  }
}

}  // namespace

const detail::GemmKernels& detail::kernels_for(CpuIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512:
      return avx512_kernels();
    case CpuIsa::kAvx2:
      return avx2_kernels();
#endif
    default:
      return portable_kernels();
  }
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return "portable";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) {
  if (name == "portable") return CpuIsa::kPortable;
  if (name == "avx2") return CpuIsa::kAvx2;
  if (name == "avx512") return CpuIsa::kAvx512;
  return std::nullopt;
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return true;
    case CpuIsa::kAvx2:
      return features().avx2;
    case CpuIsa::kAvx512:
      return features().avx512;
  }
  return false;
}

CpuIsa active_cpu_isa() {
  static const CpuIsa isa = choose_isa();
  return isa;
}

void gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
              int64_t n, const float* bias, float* y, int64_t ldy, ThreadPool* pool) {
  const GemmWeight one{w, w_dtype, n, bias, y, ldy};
  run(active_cpu_isa(), x, m, k, ldx, {&one, 1}, pool);
}

void gemm_xwt_multi(const float* x, int64_t m, int64_t k, int64_t ldx,
                    std::span<const GemmWeight> weights, ThreadPool* pool) {
  run(active_cpu_isa(), x, m, k, ldx, weights, pool);
}

void gemm_xwt_isa(CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx, const void* w,
                  DType w_dtype, int64_t n, const float* bias, float* y, int64_t ldy,
                  ThreadPool* pool) {
  require_supported(isa);
  const GemmWeight one{w, w_dtype, n, bias, y, ldy};
  run(isa, x, m, k, ldx, {&one, 1}, pool);
}

void gemm_xwt_multi_isa(CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx,
                        std::span<const GemmWeight> weights, ThreadPool* pool) {
  require_supported(isa);
  run(isa, x, m, k, ldx, weights, pool);
}

namespace detail {
namespace {

// A 64-byte aligned float buffer that only grows.
class ScratchBuffer {
 public:
  float* get(size_t floats) {
    if (floats > cap_) {
      buf_.reset(
          static_cast<float*>(::operator new[](floats * sizeof(float), std::align_val_t(64))));
      cap_ = floats;
    }
    return buf_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<float[], Free> buf_;
  size_t cap_ = 0;
};

}  // namespace

float* task_scratch(size_t floats) {
  thread_local ScratchBuffer buf;
  return buf.get(floats);
}

float* caller_scratch(size_t floats) {
  thread_local ScratchBuffer buf;
  return buf.get(floats);
}

void micro_cols(const GemmKernels& kern, int rows, const float* xp, const float* panel, int64_t kcb,
                float* y, int64_t ldy, int64_t cols, bool accumulate, const float* bias) {
  const int64_t nr = kern.nr;
  if (cols == nr) return kern.micro(rows, xp, panel, kcb, y, ldy, accumulate, bias);
  // Partial tile: compute nr columns into a side tile, copy the valid ones.
  constexpr int64_t kMaxTile = 16 * 32;  // >= mr * nr on every path
  alignas(64) float tile[kMaxTile];
  alignas(64) float bias_pad[32];
  for (int r = 0; r < rows; ++r) {
    if (accumulate) std::memcpy(tile + r * nr, y + r * ldy, cols * sizeof(float));
    std::fill(tile + r * nr + (accumulate ? cols : 0), tile + (r + 1) * nr, 0.f);
  }
  if (bias != nullptr) {
    std::memcpy(bias_pad, bias, cols * sizeof(float));
    std::fill(bias_pad + cols, bias_pad + nr, 0.f);
  }
  kern.micro(rows, xp, panel, kcb, tile, nr, accumulate, bias != nullptr ? bias_pad : nullptr);
  for (int r = 0; r < rows; ++r) std::memcpy(y + r * ldy, tile + r * nr, cols * sizeof(float));
}

int64_t packed_x_stride(const GemmKernels& kern, int64_t k) {
  return ((k + 1) / 2 * 2 * kern.mr + 16 + 15) / 16 * 16;
}

void pack_x_blocks(const GemmKernels& kern, const float* x, int64_t m, int64_t k, int64_t ldx,
                   float* out, int64_t stride, ThreadPool& pool) {
  const int64_t mr = kern.mr;
  const int64_t mblocks = (m + mr - 1) / mr;
  auto one = [&](int64_t ib) {
    const int rows = static_cast<int>(std::min(mr, m - ib * mr));
    float* o = out + ib * stride;
    kern.pack_x(x + ib * mr * ldx, ldx, rows, k, o);
    if (k % 2 != 0) std::fill(o + k * mr, o + (k + 1) * mr, 0.f);  // bf16 pair padding
  };
  // A few blocks are packed faster here than a fork-join takes.
  if (mblocks <= 8) {
    for (int64_t ib = 0; ib < mblocks; ++ib) one(ib);
  } else {
    pool.run(mblocks, one);
  }
}

}  // namespace detail

}  // namespace tachyon::cpu
