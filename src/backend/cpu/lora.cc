// CpuBackend::lora: the step's adapters on one product (backend/ops.h). One pass over
// the pool, a task per (token, range of output columns): the task shrinks x by the rows
// of A its columns' parts read (s = A · x), then expands into its columns
// (out += B · s). A decode step of few tokens splits its columns over the threads, each
// then shrinking again what its columns need (the shrink is a small fraction of a
// range's expand); a long step gives each token one task.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {
namespace {

// Below this many multiply-adds the pool's dispatch costs more than it saves.
constexpr int64_t kLoraInlineMacs = 1 << 18;

// r rounded up to a multiple of 8, within the capacity R.
int64_t padded(int64_t r, int64_t R) {
  return std::min(R, (r + 7) / 8 * 8);
}

}  // namespace

void CpuBackend::lora(const Tensor& x, const LoraStep& step, const LoraTarget& target, Tensor& out,
                      int64_t col_offset) {
  check_lora(x, step, target, out, col_offset);
  TACHYON_CHECK(x.dtype() == DType::kF32, "lora x {}", x.str());
  const int64_t T = x.dim(0), K = target.k, N = target.n, R = step.max_rank;
  if (T == 0) return;
  const int64_t slots = step.arena.dim(0), row = step.arena.dim(1);
  const int64_t entries = step.ranks.dim(1);
  const float* arena = step.arena.data<float>();
  const int32_t* ranks = step.ranks.data<int32_t>();
  const int32_t* row_slots = step.row_slots.data<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = row_slots[t];
    TACHYON_CHECK(s < slots, "lora: token {} names slot {} of {}", t, s, slots);
    if (s < 0) continue;
    for (int32_t p = 0; p < target.parts; ++p) {
      const int32_t r = ranks[s * entries + target.rank_index + p];
      TACHYON_CHECK(r >= 0 && r <= R, "lora: rank {} past the capacity {}", r, R);
    }
  }
  // Column ranges per token: enough tasks for the pool, none under 256 columns; a product
  // too small to repay the pool's dispatch runs on the calling thread.
  const int64_t threads = pool_.num_threads();
  const int64_t chunks =
      std::clamp<int64_t>((threads + T - 1) / T, 1, std::max<int64_t>(1, N / 256));
  const int64_t width = (N + chunks - 1) / chunks;
  const int64_t macs = T * (target.parts * R * K + N * R);
  const int64_t grain = macs < kLoraInlineMacs ? T * chunks : 1;
  const float* xs = x.data<float>();
  float* ys = out.data<float>() + col_offset;
  const int64_t ldo = out.dim(1);
  pool_.parallel_for(0, T * chunks, grain, [&](int64_t i0, int64_t i1) {
    std::vector<float> s(static_cast<size_t>(R));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / chunks, c0 = (i % chunks) * width, c1 = std::min(N, c0 + width);
      const int32_t slot = row_slots[t];
      if (slot < 0 || c0 >= c1) continue;
      const float* base = arena + slot * row;
      const float* b = base + target.b_offset;
      for (int32_t p = 0; p < target.parts; ++p) {
        const int64_t p0 = p > 0 ? target.part_end[p - 1] : 0, p1 = target.part_end[p];
        const int64_t lo = std::max(c0, p0), hi = std::min(c1, p1);
        const int32_t r = ranks[slot * entries + target.rank_index + p];
        if (lo >= hi || r == 0) continue;
        const float* a = base + target.a_offset + p * R * K;
        for (int32_t j = 0; j < r; ++j) s[static_cast<size_t>(j)] = dot(a + j * K, xs + t * K, K);
        std::fill(s.begin() + r, s.end(), 0.f);
        float* y = ys + t * ldo;
        // B's columns past r are zero (and s past r is): the whole rows, rounded up to
        // the vector width, eight columns' sums at a time.
        dot_rows_add(b + lo * R, R, hi - lo, s.data(), padded(r, R), y + lo);
      }
    }
  });
}

}  // namespace tachyon::cpu
