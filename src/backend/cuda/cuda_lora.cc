// CudaBackend::lora (backend/ops.h): the shrink and expand kernels of lora.cu. Nothing is
// read back from the device (row_slots and ranks stay there), so a recorded graph replays
// it for any assignment of slots.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/lora_kernels.h"
#include "core/error.h"

namespace tachyon::cuda {

void CudaBackend::lora(const Tensor& x, const LoraStep& step, const LoraTarget& target, Tensor& out,
                       int64_t col_offset) {
  check_lora(x, step, target, out, col_offset);
  check_act(x, "lora x");
  check_act(out, "lora out");
  check_here(step.arena, "lora arena");
  check_here(step.ranks, "lora ranks");
  check_here(step.row_slots, "lora row_slots");
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(step.arena.raw()) % 16 == 0,
                "lora: x {} and the arena must start on 16 bytes", x.str());
  TACHYON_CHECK(
      lora_supports(target.k, step.max_rank, step.arena.dim(1), target.a_offset, target.b_offset),
      "lora: the CUDA kernels need K ({}), the rank capacity ({}, at most 64), the "
      "arena row ({}) and the A and B offsets ({}, {}) in multiples of 8 elements",
      target.k, step.max_rank, step.arena.dim(1), target.a_offset, target.b_offset);
  TACHYON_CHECK(step.arena.dim(0) <= INT32_MAX, "lora: {} arena slots", step.arena.dim(0));
  const int64_t t = x.dim(0);
  wrote(out);
  if (t == 0) return;
  LoraLaunch l;
  l.x = x.raw();
  l.arena = step.arena.raw();
  l.ranks = step.ranks.data<int32_t>();
  l.row_slots = step.row_slots.data<int32_t>();
  l.out =
      static_cast<char*>(out.raw()) + col_offset * static_cast<int64_t>(dtype_size(out.dtype()));
  l.err = err_dev_;
  l.type = x.dtype();
  l.t = t;
  l.n = target.n;
  l.k = target.k;
  l.ldo = out.dim(1);
  l.row_elems = step.arena.dim(1);
  l.a_offset = target.a_offset;
  l.b_offset = target.b_offset;
  l.rank_entries = step.ranks.dim(1);
  l.slots = static_cast<int32_t>(step.arena.dim(0));
  l.max_rank = step.max_rank;
  l.parts = target.parts;
  l.rank_index = target.rank_index;
  for (int p = 0; p < 3; ++p) l.part_end[p] = target.part_end[p];
  const int64_t floats = lora_scratch_floats(t, target.k, target.parts, step.max_rank, x.dtype());
  l.scratch = static_cast<float*>(scratch(lora_scratch_, static_cast<size_t>(floats) * 4));
  launch_lora(l, stream_);
}

}  // namespace tachyon::cuda
