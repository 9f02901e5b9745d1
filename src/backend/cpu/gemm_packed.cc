// Products over packed weights (gemm.h, pack_weight): the layout, and the blocking and
// threading around GemmKernels::packed_micro (or, on paths without one, around micro on
// panels unpacked to f32).
//
// Every output element is one f32 accumulation over k in increasing order (the partial
// sums of k chunks pass through y in f32): a row's result does not depend on m, on the
// other rows or on how the work is split.
#include <algorithm>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {
namespace {

// k steps interleaved in one element group of a panel (bf16: pairs).
int64_t k_group(DType dtype) {
  return dtype == DType::kBF16 ? 2 : 1;
}

int64_t padded_k(DType dtype, int64_t k) {
  const int64_t g = k_group(dtype);
  return (k + g - 1) / g * g;
}

int64_t panel_count(int64_t n) {
  return (n + kPanel - 1) / kPanel;
}

// Panel s of w ([n, k], elements of T copied bit for bit, G k steps per group), zeros
// past n and k. Written in order: the 32 rows' current cache lines stay in L1 while
// each is read 64 bytes at a time (stores scattered 64 bytes apart were ~5x slower).
template <typename T, int G>
void pack_panel(const T* w, int64_t n, int64_t k, int64_t s, T* out) {
  const int64_t kp = (k + G - 1) / G * G;
  const T* rows[kPanel];
  for (int64_t r = 0; r < kPanel; ++r)
    rows[r] = s * kPanel + r < n ? w + (s * kPanel + r) * k : nullptr;
  for (int64_t p0 = 0; p0 < kp; p0 += G) {
    for (int64_t r = 0; r < kPanel; ++r) {
      for (int e = 0; e < G; ++e)
        *out++ = rows[r] != nullptr && p0 + e < k ? rows[r][p0 + e] : T{0};
    }
  }
}

// Columns [0, kPanel) of a packed panel at k steps [0, kcb) as f32, in sub-panels of nr
// columns: out[q][p][c] = w[q * nr + c] at step p (the layout micro reads).
void unpack_panel(const void* panel, DType dtype, int64_t kcb, int64_t nr, float* out) {
  const auto* h = static_cast<const uint16_t*>(panel);
  const auto* f = static_cast<const float*>(panel);
  for (int64_t p = 0; p < kcb; ++p) {
    for (int64_t c = 0; c < kPanel; ++c) {
      float v;
      if (dtype == DType::kBF16) {
        v = bf16_to_f32(bf16{h[(p / 2) * 2 * kPanel + c * 2 + p % 2]});
      } else if (dtype == DType::kF16) {
        v = f16_to_f32(f16{h[p * kPanel + c]});
      } else {
        v = f[p * kPanel + c];
      }
      out[(c / nr) * kcb * nr + p * nr + c % nr] = v;
    }
  }
}

// The k chunk: k split evenly into pieces of at most `most` (even, for bf16 pairs).
int64_t k_chunk(int64_t k, int64_t most) {
  const int64_t chunks = (k + most - 1) / most;
  return ((k + chunks - 1) / chunks + 1) / 2 * 2;
}

}  // namespace

int64_t packed_weight_elems(DType dtype, int64_t n, int64_t k) {
  TACHYON_CHECK(n >= 0 && k >= 0, "packed weight [{}, {}]", n, k);
  return panel_count(n) * padded_k(dtype, k) * kPanel;
}

void pack_weight(const void* w, DType dtype, int64_t n, int64_t k, void* out, ThreadPool* pool) {
  TACHYON_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
                "pack_weight dtype {}", dtype_name(dtype));
  const int64_t g = k_group(dtype);
  const int64_t panel = padded_k(dtype, k) * kPanel;
  ThreadPool& tp = pool != nullptr ? *pool : ThreadPool::global();
  tp.run(panel_count(n), [&](int64_t s) {
    if (dtype == DType::kF32) {
      pack_panel<uint32_t, 1>(static_cast<const uint32_t*>(w), n, k, s,
                              static_cast<uint32_t*>(out) + s * panel);
    } else if (g == 1) {
      pack_panel<uint16_t, 1>(static_cast<const uint16_t*>(w), n, k, s,
                              static_cast<uint16_t*>(out) + s * panel);
    } else {
      pack_panel<uint16_t, 2>(static_cast<const uint16_t*>(w), n, k, s,
                              static_cast<uint16_t*>(out) + s * panel);
    }
  });
}

namespace detail {

namespace {

// What a task of run_packed reads: packed x and the panel numbering of the entries.
struct PackedJob {
  const GemmKernels& kern;
  std::span<const GemmWeight> weights;
  const float* xbuf;  // packed x, block ib at ib * stride
  int64_t stride, k;
};

// A run of panels [s, s + count) of one entry.
struct PanelRun {
  const GemmWeight* w;
  int64_t s, count;
};

// Splits global panels [g0, g1) into runs of at most `most` panels of one entry each.
template <typename Fn>
void for_panel_runs(std::span<const GemmWeight> weights, int64_t g0, int64_t g1, int64_t most,
                    Fn&& fn) {
  size_t e = 0;
  int64_t first = 0;  // global number of entry e's first panel
  for (int64_t g = g0; g < g1;) {
    while (g - first >= panel_count(weights[e].n)) {
      first += panel_count(weights[e].n);
      ++e;
    }
    const int64_t s = g - first;
    const int64_t count = std::min({most, g1 - g, panel_count(weights[e].n) - s});
    fn(PanelRun{&weights[e], s, count});
    g += count;
  }
}

// Step p0 (even) of panel s of w: p0 * kPanel elements in either layout.
const void* panel_at(const GemmWeight& w, int64_t k, int64_t s, int64_t p0) {
  const int64_t elems = s * padded_k(w.dtype, k) * kPanel + p0 * kPanel;
  return static_cast<const char*>(w.w) + elems * dtype_size(w.dtype);
}

// Few rows: packed_micro converts the weights in registers, several panels a call.
void task_in_registers(const PackedJob& job, int64_t g0, int64_t g1, int64_t i0, int64_t i1) {
  const GemmKernels& kern = job.kern;
  const int64_t mr = kern.mr, k = job.k;
  const int most = kern.packed_panels(static_cast<int>(std::min(mr, i1 - i0)));
  // Long chunks: fewer passes over y (shorter ones that stay in L1 measured no faster).
  const int64_t kc = k_chunk(k, 1024);
  for (int64_t p0 = 0; p0 < k; p0 += kc) {
    const int64_t kcb = std::min(kc, k - p0);
    const bool last = p0 + kcb == k;
    for_panel_runs(job.weights, g0, g1, most, [&](const PanelRun& r) {
      const GemmWeight& w = *r.w;
      const int64_t j = r.s * kPanel;
      const int last_cols = static_cast<int>(std::min(kPanel, w.n - (r.s + r.count - 1) * kPanel));
      const float* bias = last && w.bias != nullptr ? w.bias + j : nullptr;
      const void* panel = panel_at(w, k, r.s, p0);
      for (int64_t i = i0; i < i1; i += mr) {
        kern.packed_micro(static_cast<int>(std::min(mr, i1 - i)),
                          job.xbuf + (i / mr) * job.stride + p0 * mr, panel,
                          padded_k(w.dtype, k) * kPanel, static_cast<int>(r.count), w.dtype, kcb,
                          w.y + i * w.ldy + j, w.ldy, last_cols, p0 > 0, bias);
      }
    });
  }
}

// Many rows (or no packed_micro): a few panels unpacked to f32 once, then the f32 kernel
// over every row tile, a tile of x staying in L1 while it meets those panels.
void task_unpacked(const PackedJob& job, int64_t g0, int64_t g1, int64_t i0, int64_t i1) {
  const GemmKernels& kern = job.kern;
  const int64_t mr = kern.mr, k = job.k, nr = kern.nr;
  constexpr int64_t kPanels = 4;  // 128 columns: 512 KiB of f32 at kc = 1024, in L2
  const int64_t kc = k_chunk(k, 1024);
  float* unpacked = task_scratch(static_cast<size_t>(kPanels * kc * kPanel));
  for (int64_t p0 = 0; p0 < k; p0 += kc) {
    const int64_t kcb = std::min(kc, k - p0);
    const bool last = p0 + kcb == k;
    for_panel_runs(job.weights, g0, g1, kPanels, [&](const PanelRun& r) {
      const GemmWeight& w = *r.w;
      for (int64_t q = 0; q < r.count; ++q) {
        const void* panel = panel_at(w, k, r.s + q, p0);
        float* out = unpacked + q * kcb * kPanel;
        if (kern.unpack_panel != nullptr) {
          kern.unpack_panel(panel, w.dtype, kcb, out);
        } else {
          unpack_panel(panel, w.dtype, kcb, nr, out);
        }
      }
      const int64_t j = r.s * kPanel;
      const int64_t cols = std::min(r.count * kPanel, w.n - j);
      for (int64_t i = i0; i < i1; i += mr) {
        const int rows = static_cast<int>(std::min(mr, i1 - i));
        const float* xi = job.xbuf + (i / mr) * job.stride + p0 * mr;
        // Sub-panels of nr columns follow each other, kcb * nr floats apart.
        for (int64_t c = 0; c < cols; c += nr) {
          micro_cols(kern, rows, xi, unpacked + c * kcb, kcb, w.y + i * w.ldy + j + c, w.ldy,
                     std::min(nr, cols - c), p0 > 0,
                     last && w.bias != nullptr ? w.bias + j + c : nullptr);
        }
      }
    });
  }
}

}  // namespace

void run_packed(const GemmKernels& kern, const float* x, int64_t m, int64_t k, int64_t ldx,
                std::span<const GemmWeight> weights, ThreadPool& pool) {
  const int64_t mr = kern.mr;
  const int64_t mblocks = (m + mr - 1) / mr;
  const int64_t stride = packed_x_stride(kern, k);
  float* xbuf = caller_scratch(static_cast<size_t>(mblocks * stride));
  pack_x_blocks(kern, x, m, k, ldx, xbuf, stride, pool);

  // Panels of every entry, numbered consecutively; a task takes a run of them and a
  // range of rows. About four tasks a thread (a thread slowed by other work is helped
  // out), but none so small that its setup dominates, and with many rows runs of four
  // panels (each tile of x meets 128 columns while in L1); rows are split only when
  // there are too few panels.
  constexpr int64_t kUnpackTiles = 4;  // rows from which panels are unpacked, in tiles
  int64_t total = 0;
  for (const GemmWeight& e : weights) total += panel_count(e.n);
  const int64_t threads = pool.num_threads();
  constexpr double kMinTaskFlops = 1e6;
  const double panel_flops = 2.0 * static_cast<double>(m * k * kPanel);
  int64_t per_task = std::max<int64_t>(1, total / (threads * 4));
  per_task = std::max(per_task, static_cast<int64_t>(kMinTaskFlops / panel_flops));
  if (mblocks >= kUnpackTiles) per_task = std::max<int64_t>(per_task, 4);
  per_task = std::min(per_task, (total + threads - 1) / threads);
  const int64_t panel_tasks = (total + per_task - 1) / per_task;
  int64_t row_parts = 1;
  if (panel_tasks < threads * 2)
    row_parts = std::min<int64_t>((threads * 2 + panel_tasks - 1) / panel_tasks, mblocks);
  const int64_t rows_per_part = (mblocks + row_parts - 1) / row_parts * mr;
  row_parts = (m + rows_per_part - 1) / rows_per_part;

  const PackedJob job{kern, weights, xbuf, stride, k};
  pool.run(panel_tasks * row_parts, [&](int64_t t) {
    const int64_t g0 = (t / row_parts) * per_task, g1 = std::min(total, g0 + per_task);
    const int64_t i0 = (t % row_parts) * rows_per_part, i1 = std::min(m, i0 + rows_per_part);
    // Converting in registers costs each row tile a few percent of its FMA slots;
    // unpacking costs a pass over the panels, repaid over a few tiles.
    if (kern.packed_micro != nullptr && i1 - i0 < kUnpackTiles * mr) {
      task_in_registers(job, g0, g1, i0, i1);
    } else {
      task_unpacked(job, g0, g1, i0, i1);
    }
  });
}

}  // namespace detail
}  // namespace tachyon::cpu
