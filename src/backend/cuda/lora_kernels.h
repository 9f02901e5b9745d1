// Launchers of the low-rank adapter kernels (lora.cu). Like kernels.h, free of
// backend/ops.h and core/error.h; LoraLaunch carries what CudaBackend::lora reads off
// backend/ops.h's LoraStep and LoraTarget.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::cuda {

// The device error code (beside kernels.h's DeviceError) of a token naming a slot past
// the arena or a rank past the capacity.
constexpr int kErrLoraSlot = 32;

// One product's low-rank adapters (backend/ops.h's lora()): out[t, c] += B_s[c, :r] ·
// (A_s[p R : p R + r, :] · x[t]) for the slot s = row_slots[t] >= 0 of each token, the sum
// rounded once. x [t, k], the arena [slots, row_elems] and out (row stride ldo, already at
// the product's first column) in one of f32, bf16 and f16; ranks [slots, rank_entries] i32. A slot
// past the arena or a rank past max_rank sets kErrLoraSlot and leaves that token's row alone.
struct LoraLaunch {
  const void* x = nullptr;
  const void* arena = nullptr;
  const int32_t* ranks = nullptr;
  const int32_t* row_slots = nullptr;
  void* out = nullptr;
  float* scratch = nullptr;  // lora_scratch_floats() floats
  int* err = nullptr;
  DType type = DType::kBF16;
  int64_t t = 0, n = 0, k = 0, ldo = 0;
  int64_t row_elems = 0, a_offset = 0, b_offset = 0, rank_entries = 0;
  int32_t slots = 0, max_rank = 0, parts = 1, rank_index = 0;
  int64_t part_end[3] = {0, 0, 0};
};
// Whether the kernels take this layout: k, max_rank (<= 64), the arena row and both
// offsets multiples of 8 elements (16-byte rows).
bool lora_supports(int64_t k, int max_rank, int64_t row_elems, int64_t a_offset, int64_t b_offset);
// The f32 scratch the launch needs for t tokens.
int64_t lora_scratch_floats(int64_t t, int64_t k, int parts, int max_rank, DType type);
void launch_lora(const LoraLaunch& l, cudaStream_t stream);

}  // namespace tachyon::cuda
