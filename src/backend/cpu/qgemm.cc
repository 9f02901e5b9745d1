// Quantized weights on the CPU: the repacking (backend/cpu/qgemm.h's layout), the
// choice of kernel, the threading, and the blocked GEMM over dequantized panels.
#include "backend/cpu/qgemm.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/gemm_kernels.h"
#include "backend/cpu/packed_weight.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {
namespace {

// The owner of a packed copy: the packing and its shape. The deleter type marks a
// packed copy.
struct QOwner {
  QPackedWeight packed;
  Shape shape;
};
struct QOwnerDeleter {
  void operator()(QOwner* p) const { delete p; }
};

// Panel p of m into w's layout.
void pack_panel(const QuantizedMatrix& m, const QPackedWeight& w, int64_t p, uint8_t* out) {
  const bool fp8 = w.kind == QKind::kFp8;
  const int64_t row_bytes = m.row_bytes();
  const float* scales = m.scales.data<float>();
  const int64_t scale_cols = m.scales.dim(1);
  const uint8_t* zeros = fp8 ? nullptr : m.zeros.data<uint8_t>();
  for (int64_t g = 0; g < w.groups; ++g) {
    uint8_t* base = out + p * w.panel_bytes + g * w.group_bytes;
    auto* s = reinterpret_cast<float*>(base);
    uint8_t* z = base + kQPanel * 4;
    uint8_t* v = base + w.header_bytes();
    const int64_t s0 = g * w.group, steps = w.group_steps(g);
    for (int64_t r = 0; r < kQPanel; ++r) {
      const int64_t i = p * kQPanel + r;
      if (i >= m.n) {
        s[r] = 0.f;
        if (w.zeros) z[r] = 0;
        for (int64_t t = 0; t < steps; ++t) {
          if (w.kind == QKind::kInt4) {
            if (t % 2 == 0) v[(t / 2) * kQPanel + r] = 0;
          } else {
            v[t * kQPanel + r] = 0;
          }
        }
        continue;
      }
      const uint8_t* row = m.q.data<uint8_t>() + i * row_bytes;
      if (fp8) {
        s[r] = scales[(i / m.block_n) * scale_cols + s0 / m.block_k] * 256.f;
        for (int64_t t = 0; t < steps; ++t) v[t * kQPanel + r] = row[s0 + t];
        continue;
      }
      s[r] = scales[i * scale_cols + g];
      if (w.zeros) z[r] = zeros[i * scale_cols + g];
      for (int64_t t = 0; t < steps; ++t) {
        const uint32_t q = packed_int(row, m.bits, s0 + t);
        if (w.kind == QKind::kInt4) {
          uint8_t& b = v[(t / 2) * kQPanel + r];
          b = t % 2 == 0 ? static_cast<uint8_t>(q) : static_cast<uint8_t>(b | (q << 4));
        } else {
          v[t * kQPanel + r] = static_cast<uint8_t>(w.signed_q ? q ^ 0x80u : q);
        }
      }
    }
  }
}

int64_t value_bytes(QKind kind, int64_t steps) {
  return (kind == QKind::kInt4 ? (steps + 1) / 2 : steps) * kQPanel;
}

const detail::QKernels& qkernels_for(CpuIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512:
      return detail::avx512_qkernels();
    case CpuIsa::kAvx2:
      return detail::avx2_qkernels();
#endif
    default:
      return detail::portable_qkernels();
  }
}

constexpr int64_t kNc = 128;      // weight rows per GEMM block (a multiple of every nr)
constexpr int64_t kMChunk = 512;  // rows of x per pass of the GEMM

// The blocked GEMM of up to kMChunk rows: x packed per block of mr rows, then blocks of
// kNc weight rows (and of rows of x when those are few) over the threads, each
// dequantizing kc steps of its rows at a time into micro's panels.
void gemm_rows(const detail::GemmKernels& kern, const detail::QKernels& qk, const float* x,
               int64_t m, int64_t ldx, const QPackedWeight& w, const float* bias, float* y,
               int64_t ldy, ThreadPool& pool) {
  const int64_t k = w.k, mr = kern.mr, nr = kern.nr, kc = kern.kc;
  const int64_t mblocks = (m + mr - 1) / mr;
  const int64_t stride = detail::packed_x_stride(kern, k);
  float* xbuf = detail::caller_scratch(static_cast<size_t>(mblocks * stride));
  detail::pack_x_blocks(kern, x, m, k, ldx, xbuf, stride, pool);

  const int64_t cblocks = (w.n + kNc - 1) / kNc;
  const int64_t threads = pool.num_threads();
  int64_t row_parts = 1;
  if (cblocks < threads * 2)
    row_parts = std::min<int64_t>((threads * 2 + cblocks - 1) / cblocks, mblocks);
  const int64_t rows = (mblocks + row_parts - 1) / row_parts * mr;
  row_parts = (m + rows - 1) / rows;
  pool.run(cblocks * row_parts, [&](int64_t t) {
    const int64_t j0 = (t / row_parts) * kNc, j1 = std::min(w.n, j0 + kNc);
    const int64_t i0 = (t % row_parts) * rows, i1 = std::min(m, i0 + rows);
    const int64_t qpanels = (j1 - j0 + kQPanel - 1) / kQPanel;
    const int64_t npanels = (j1 - j0 + nr - 1) / nr;
    // Dequantized straight into micro's [kc][nr] panels when nr is a multiple of 16
    // (panel s holds packed panels s * nr / 16 ...); the portable nr of 8 takes halves
    // of a [kc][16] panel.
    const bool direct = nr % kQPanel == 0;
    float* panel = detail::task_scratch(static_cast<size_t>(npanels * kc * nr) +
                                        (direct ? 0 : static_cast<size_t>(kc * kQPanel)));
    float* side = panel + npanels * kc * nr;
    for (int64_t p0 = 0; p0 < k; p0 += kc) {
      const int64_t kcb = std::min(kc, k - p0);
      for (int64_t q = 0; q < qpanels; ++q) {
        const int64_t col = q * kQPanel, s = col / nr;
        float* dst = panel + s * kc * nr;
        if (direct) {
          qk.dequant(w, j0 / kQPanel + q, p0, kcb, dst + col % nr, nr);
          continue;
        }
        qk.dequant(w, j0 / kQPanel + q, p0, kcb, side, kQPanel);
        for (int64_t h = 0; h < kQPanel / nr && s + h < npanels; ++h)
          for (int64_t p = 0; p < kcb; ++p)
            std::memcpy(dst + h * kc * nr + p * nr, side + p * kQPanel + h * nr,
                        static_cast<size_t>(nr) * sizeof(float));
      }
      // A block's last nr-panel may extend past its packed panels: zeros there.
      if (direct && qpanels * kQPanel < npanels * nr)
        for (int64_t p = 0; p < kcb; ++p)
          std::fill_n(panel + (npanels - 1) * kc * nr + p * nr + (qpanels * kQPanel) % nr,
                      nr - (qpanels * kQPanel) % nr, 0.f);
      const bool last = p0 + kcb == k;
      for (int64_t i = i0; i < i1; i += mr) {
        const int r = static_cast<int>(std::min(mr, i1 - i));
        const float* xi = xbuf + (i / mr) * stride + p0 * mr;
        for (int64_t s = 0; s < npanels; ++s) {
          const int64_t jj = j0 + s * nr;
          detail::micro_cols(kern, r, xi, panel + s * kc * nr, kcb, y + i * ldy + jj, ldy,
                             std::min(nr, j1 - jj), p0 > 0,
                             last && bias != nullptr ? bias + jj : nullptr);
        }
      }
    }
  });
}

}  // namespace

Tensor pack_quantized_weight(const Tensor& view, ThreadPool& pool) {
  const QuantizedMatrix* m = quantized(view);
  TACHYON_CHECK(m != nullptr && m->device().is_cpu(),
                "pack_quantized_weight: {} is not a quantized host matrix",
                view ? view.str() : std::string("none"));
  m->validate();
  auto owner = std::shared_ptr<QOwner>(new QOwner{}, QOwnerDeleter{});
  owner->shape = view.shape();
  QPackedWeight& w = owner->packed;
  w.n = m->n;
  w.k = m->k;
  w.what = m->str();
  if (m->scheme == QuantScheme::kFp8) {
    w.kind = QKind::kFp8;
    w.group = m->block_k;
    // e4m3 has no infinities; its NaN (S.1111.111) is no weight.
    const auto* q = m->q.data<uint8_t>();
    for (int64_t i = 0; i < m->n * m->k; ++i)
      if ((q[i] & 0x7f) == 0x7f)
        raise<InvalidArgument>("quantized matrix {}: NaN at row {} column {}", m->str(), i / m->k,
                               i % m->k);
  } else {
    w.group = m->group_size;
    // Odd groups of 4-bit values would split a byte: those are stored as 8-bit values.
    w.kind = m->bits == 4 && m->group_size % 2 == 0 ? QKind::kInt4 : QKind::kInt8;
    // Symmetric int8: signed values, no zeros; symmetric int4: the common zero 8.
    w.signed_q = m->symmetric && m->bits == 8;
    const bool sym4 = m->symmetric && w.kind == QKind::kInt4;
    w.zeros = !w.signed_q && !sym4;
    w.zero = sym4 ? 8 : 0;
    if (m->perm) w.perm.assign(m->perm.data<int32_t>(), m->perm.data<int32_t>() + m->k);
  }
  w.groups = (w.k + w.group - 1) / w.group;
  w.group_bytes = w.header_bytes() + value_bytes(w.kind, w.group);
  w.panel_bytes = (w.groups - 1) * w.group_bytes + w.header_bytes() +
                  value_bytes(w.kind, w.group_steps(w.groups - 1));
  w.panel_bytes = (w.panel_bytes + 63) / 64 * 64;
  w.memory = alloc_large(static_cast<size_t>(w.panels() * w.panel_bytes));
  auto* out = static_cast<uint8_t*>(w.memory.get());
  pool.run(w.panels(), [&](int64_t p) { pack_panel(*m, w, p, out); });
  void* data = w.memory.get();
  return Tensor::wrap(data, view.shape(), view.dtype(), std::move(owner));
}

const QPackedWeight* packed_quantized(const Tensor& t) {
  if (!t || std::get_deleter<QOwnerDeleter>(t.owner()) == nullptr) return nullptr;
  const auto* owner = static_cast<const QOwner*>(t.owner().get());
  TACHYON_CHECK(t.raw() == owner->packed.memory.get() && t.shape() == owner->shape,
                "{} is a view of part of a packed quantized weight", t.str());
  return &owner->packed;
}

void qgemm(CpuIsa isa, const float* x, int64_t m, int64_t ldx, const QPackedWeight& w,
           const float* bias, float* y, int64_t ldy, ThreadPool& pool) {
  TACHYON_CHECK(m >= 0 && ldx >= w.k && ldy >= w.n, "qgemm m={} ldx={} ldy={} for {}", m, ldx, ldy,
                w.what);
  if (m == 0) return;
  // Act-order: x's columns gathered once (caller's scratch is the GEMM's packed x, so a
  // buffer of its own).
  std::vector<float> gathered;
  if (!w.perm.empty()) {
    gathered.resize(static_cast<size_t>(m * w.k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < w.k; ++j)
        gathered[static_cast<size_t>(i * w.k + j)] = x[i * ldx + w.perm[static_cast<size_t>(j)]];
    x = gathered.data();
    ldx = w.k;
  }
  const detail::QKernels& qk = qkernels_for(isa);
  const detail::GemmKernels& kern = detail::kernels_for(isa);
  if (m <= qk.max_m) {
    // A few blocks of panels per thread (one slowed by other work is helped out).
    const int64_t panels = w.panels();
    const int64_t per = std::max<int64_t>(1, panels / (pool.num_threads() * 4));
    const int64_t tasks = (panels + per - 1) / per;
    pool.run(tasks, [&](int64_t t) {
      qk.gemv(w, x, static_cast<int>(m), ldx, t * per, std::min(panels, (t + 1) * per), bias, y,
              ldy);
    });
    return;
  }
  for (int64_t c0 = 0; c0 < m; c0 += kMChunk)
    gemm_rows(kern, qk, x + c0 * ldx, std::min(kMChunk, m - c0), ldx, w, bias, y + c0 * ldy, ldy,
              pool);
}

}  // namespace tachyon::cpu
