// CpuBackend::lora: the step's adapters on one product (backend/ops.h). Two passes over
// the pool: the shrink s = A · x for every token and part, then the expand
// out += B · s over blocks of (token, output columns), so a decode step of few tokens
// still spreads over every thread.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {

void CpuBackend::lora(const Tensor& x, const LoraStep& step, const LoraTarget& target, Tensor& out,
                      int64_t col_offset) {
  check_lora(x, step, target, out, col_offset);
  TACHYON_CHECK(x.dtype() == DType::kF32, "lora x {}", x.str());
  const int64_t T = x.dim(0), K = target.k, R = step.max_rank, P = target.parts;
  if (T == 0) return;
  const int64_t slots = step.arena.dim(0), row = step.arena.dim(1);
  const int64_t entries = step.ranks.dim(1);
  const float* arena = step.arena.data<float>();
  const int32_t* ranks = step.ranks.data<int32_t>();
  const int32_t* row_slots = step.row_slots.data<int32_t>();
  // Each token's rank per part (0 for the base model's rows).
  std::vector<int32_t> rank(static_cast<size_t>(T * P), 0);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = row_slots[t];
    if (s < 0) continue;
    TACHYON_CHECK(s < slots, "lora: token {} names slot {} of {}", t, s, slots);
    for (int64_t p = 0; p < P; ++p) {
      const int32_t r = ranks[s * entries + target.rank_index + p];
      TACHYON_CHECK(r >= 0 && r <= R, "lora: rank {} past the capacity {}", r, R);
      rank[static_cast<size_t>(t * P + p)] = r;
    }
  }
  // The shrink: s[t, p R + j] = A_slot[p R + j, :] · x[t, :].
  std::vector<float> shrunk(static_cast<size_t>(T * P * R), 0.f);
  const float* xs = x.data<float>();
  pool_.parallel_for(0, T * P, std::max<int64_t>(1, 16384 / std::max<int64_t>(K * R, 1)),
                     [&](int64_t i0, int64_t i1) {
                       for (int64_t i = i0; i < i1; ++i) {
                         const int64_t t = i / P, p = i % P;
                         const int32_t r = rank[static_cast<size_t>(i)];
                         if (r == 0) continue;
                         const float* a = arena + row_slots[t] * row + target.a_offset + p * R * K;
                         for (int64_t j = 0; j < r; ++j)
                           shrunk[static_cast<size_t>(i * R + j)] = dot(a + j * K, xs + t * K, K);
                       }
                     });
  // The expand: out[t, c] += B_slot[c, :r] · s[t, part(c)].
  const int64_t N = target.n, ldo = out.dim(1);
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = (N + kCols - 1) / kCols;
  float* ys = out.data<float>() + col_offset;
  pool_.parallel_for(
      0, T * col_blocks, std::max<int64_t>(1, 4096 / (kCols * R)), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t t = i / col_blocks, c0 = (i % col_blocks) * kCols;
          if (row_slots[t] < 0) continue;
          const float* b = arena + row_slots[t] * row + target.b_offset;
          int64_t p = 0;
          for (int64_t c = c0; c < std::min(N, c0 + kCols); ++c) {
            while (c >= target.part_end[p]) ++p;
            const int32_t r = rank[static_cast<size_t>(t * P + p)];
            if (r == 0) continue;
            ys[t * ldo + c] += dot(b + c * R, &shrunk[static_cast<size_t>((t * P + p) * R)], r);
          }
        }
      });
}

}  // namespace tachyon::cpu
