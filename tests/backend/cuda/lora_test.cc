// The LoRA kernels (CudaBackend::lora, lora.cu, lora_prefill.cu) against a float64 host
// reference: the grouped form of decode steps (T <= 64: one group per distinct slot, K
// split over warps) and the tiled one of prefill (tensor-core shrink and expand), parts 1
// to 3, ranks below the capacity, a part of rank 0, base-model rows, a column offset into
// a wider output; the elements the adapters must leave alone keep their bits. Bad slots
// and ranks raise the device error and leave their rows alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops_fixture.h"
#include "backend/ops.h"
#include "core/error.h"

namespace tachyon::cuda_test {
namespace {

class CudaLoraTest : public CudaOpsTest {};

constexpr int32_t kSlots = 5;

struct LoraCase {
  int64_t t, k;
  std::vector<int64_t> part_end;  // the last one is N
  int32_t rank;                   // the capacity R
  int64_t col_offset, extra_cols;
};

// A case's host inputs (f32, rounded to the dtype).
struct LoraInputs {
  Tensor x, arena, start;
  std::vector<int32_t> ranks, row_slots;
  int32_t entries = 0;
  LoraTarget target;
  int64_t ldo = 0, col_offset = 0;
  int32_t R = 0;
};

// The expected out [T, ldo] in float64: start plus, for each token of a slot and each
// column of the target, the rank-r product (A rows and B columns past r are nonzero in
// the arena: the kernels must not read them). `touched` marks the elements that change.
std::vector<double> reference(const LoraInputs& in, std::vector<bool>& touched) {
  const LoraTarget& tg = in.target;
  const int32_t R = in.R;
  const int64_t T = in.x.dim(0), K = tg.k, row = in.arena.dim(1);
  std::vector<double> want = host_values(in.start);
  touched.assign(want.size(), false);
  const float* x = in.x.data<float>();
  const float* ar = in.arena.data<float>();
  std::vector<double> s(static_cast<size_t>(tg.parts * R));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t slot = in.row_slots[static_cast<size_t>(t)];
    if (slot < 0) continue;
    const float* base = ar + slot * row;
    for (int32_t p = 0; p < tg.parts; ++p)
      for (int32_t j = 0; j < R; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += static_cast<double>(base[tg.a_offset + (p * R + j) * K + k]) * x[t * K + k];
        s[static_cast<size_t>(p * R + j)] = acc;
      }
    int32_t p = 0;
    for (int64_t c = 0; c < tg.n; ++c) {
      while (c >= tg.part_end[p]) ++p;
      const int32_t r = in.ranks[static_cast<size_t>(slot * in.entries + tg.rank_index + p)];
      if (r == 0) continue;
      double acc = 0;
      for (int32_t j = 0; j < r; ++j)
        acc +=
            static_cast<double>(base[tg.b_offset + c * R + j]) * s[static_cast<size_t>(p * R + j)];
      const size_t at = static_cast<size_t>(t * in.ldo + in.col_offset + c);
      want[at] += acc;
      touched[at] = true;
    }
  }
  return want;
}

// Inputs of a case: an arena of kSlots slots (A scaled by 1/sqrt(K), B by 1/sqrt(R): a
// delta of the order of the starting values; all of it nonzero), ranks per slot: the
// capacity, half of it, 0 for the second part (the capacity for others), 3, and 5 for
// the first part only; tokens in runs of one slot with strays and base-model rows.
LoraInputs make_inputs(const LoraCase& c, DType dt, std::mt19937& rng) {
  LoraInputs in;
  const int32_t R = c.rank;
  const int64_t n = c.part_end.back();
  LoraTarget& tg = in.target;
  tg.n = n;
  tg.k = c.k;
  tg.parts = static_cast<int32_t>(c.part_end.size());
  for (int32_t p = 0; p < tg.parts; ++p) tg.part_end[p] = c.part_end[static_cast<size_t>(p)];
  tg.rank_index = 1;
  in.entries = tg.parts + 2;
  tg.a_offset = 16;
  tg.b_offset = tg.a_offset + tg.parts * R * c.k + 8;
  const int64_t row = tg.b_offset + n * R + 24;
  in.R = R;
  in.arena = rounded(randn({kSlots, row}, rng, 1.f / std::sqrt(static_cast<float>(c.k))), dt);
  {
    // B's columns of order 1/sqrt(R)
    const Tensor b =
        rounded(randn({kSlots, n * R}, rng, 1.f / std::sqrt(static_cast<float>(R))), dt);
    for (int32_t s = 0; s < kSlots; ++s)
      std::memcpy(in.arena.data<float>() + s * row + tg.b_offset, b.data<float>() + s * n * R,
                  static_cast<size_t>(n * R) * 4);
  }
  in.ranks.assign(static_cast<size_t>(kSlots * in.entries), 7);  // entries of other products
  for (int32_t p = 0; p < tg.parts; ++p) {
    const size_t e = static_cast<size_t>(tg.rank_index + p);
    in.ranks[e] = R;
    in.ranks[static_cast<size_t>(in.entries) + e] = R / 2;
    in.ranks[static_cast<size_t>(2 * in.entries) + e] = p == 1 ? 0 : R;
    in.ranks[static_cast<size_t>(3 * in.entries) + e] = 3;
    in.ranks[static_cast<size_t>(4 * in.entries) + e] = p == 0 ? 5 : 0;
  }
  std::uniform_int_distribution<int32_t> pick(-1, kSlots - 1);
  in.row_slots.resize(static_cast<size_t>(c.t));
  int32_t run = 0;
  for (int64_t t = 0; t < c.t; ++t) {
    if (t % 97 == 0) run = pick(rng);
    in.row_slots[static_cast<size_t>(t)] = c.t < 16     ? static_cast<int32_t>(t % (kSlots + 1)) - 1
                                           : t % 7 == 3 ? pick(rng)
                                                        : run;
  }
  if (c.t == 1) in.row_slots[0] = 1;
  in.x = rounded(randn({c.t, c.k}, rng), dt);
  in.ldo = c.col_offset + n + c.extra_cols;
  in.col_offset = c.col_offset;
  in.start = rounded(randn({c.t, in.ldo}, rng), dt);
  return in;
}

LoraStep device_step(cuda::CudaBackend& gpu, const LoraInputs& in, DType dt) {
  LoraStep step;
  step.arena = to_gpu(gpu, in.arena, dt);
  step.ranks = to_gpu_i32(gpu, in.ranks).reshape({kSlots, in.entries});
  step.row_slots = to_gpu_i32(gpu, in.row_slots);
  step.max_rank = in.R;
  return step;
}

TEST_P(CudaLoraTest, MatchesFloat64Reference) {
  std::vector<LoraCase> cases;
  for (const int64_t t : {1, 3, 64, 300, 2500}) {
    const int64_t k = t <= 64 ? 2056 : 520;  // past one K piece of the grouped shrink; a tail
    cases.push_back({t, k, {96}, 16, 0, 0});
    cases.push_back({t, 264, {64, 192}, 8, 8, 16});
    cases.push_back({t, k, {256, 320, 384}, 16, 24, 8});
  }
  // Larger capacities (fewer columns per expand thread; 48 KB of staged rows at 64).
  for (const int64_t t : {3, 300}) cases.push_back({t, 264, {64, 128}, 32, 0, 8});
  for (const int64_t t : {64, 100}) cases.push_back({t, 264, {64, 128, 192}, 64, 8, 0});
  // Part ends inside an 8-column tile of the prefill expand's mma, capacities whose k steps
  // of 16 span two parts, an odd row stride and column offset (no column pairs).
  for (const int64_t t : {3, 300}) {
    cases.push_back({t, 264, {60, 100, 136}, 8, 3, 2});
    cases.push_back({t, 264, {44, 100}, 24, 1, 1});
  }
  for (const LoraCase& c : cases) {
    const LoraInputs in = make_inputs(c, dt_, rng_);
    std::vector<bool> touched;
    const std::vector<double> want = reference(in, touched);
    const std::vector<double> base = host_values(in.start);
    LoraStep step = device_step(*gpu_, in, dt_);
    Tensor out = dev(in.start);
    gpu_->lora(dev(in.x), step, in.target, out, c.col_offset);
    EXPECT_NO_THROW(gpu_->synchronize());
    const std::vector<double> got = host_values(*gpu_, out);
    const std::string what = "lora T " + std::to_string(c.t) + " K " + std::to_string(c.k) +
                             " parts " + std::to_string(c.part_end.size()) + " R " +
                             std::to_string(c.rank);
    size_t moved = 0, changed = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!touched[i]) {
        ASSERT_EQ(got[i], base[i]) << what << ": element " << i << " must be left alone";
      } else {
        ++moved;
        changed += got[i] != base[i];
      }
    }
    EXPECT_GT(changed, moved / 2) << what;
    expect_near(got, want, bound_for(dt_), tag(what));
  }
}

// The same result whatever kernel ran before, and again on a second run (no state kept
// between calls; the scratch reused).
TEST_P(CudaLoraTest, Repeatable) {
  const LoraCase c{64, 4096, {128, 160, 192}, 16, 0, 0};
  const LoraInputs in = make_inputs(c, dt_, rng_);
  LoraStep step = device_step(*gpu_, in, dt_);
  Tensor x = dev(in.x);
  Tensor a = dev(in.start), b = dev(in.start);
  gpu_->lora(x, step, in.target, a, 0);
  gpu_->lora(x, step, in.target, b, 0);
  EXPECT_EQ(device_bytes(a), device_bytes(b));
}

// Recorded in a graph, then replayed for another assignment of slots and ranks written
// into the same device buffers: nothing of the first assignment stays in the launches.
TEST_P(CudaLoraTest, ReplaysInAGraph) {
  for (const int64_t t : {5, 300}) {
    LoraInputs in = make_inputs({t, 520, {64, 96, 128}, 16, 8, 8}, dt_, rng_);
    LoraStep step = device_step(*gpu_, in, dt_);
    Tensor x = dev(in.x);
    Tensor out = dev(in.start);
    gpu_->lora(x, step, in.target, out, 8);  // the scratch, outside the capture
    gpu_->synchronize();
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    TACHYON_CUDA_CHECK(cudaStreamBeginCapture(gpu_->stream(), cudaStreamCaptureModeThreadLocal));
    gpu_->lora(x, step, in.target, out, 8);
    TACHYON_CUDA_CHECK(cudaStreamEndCapture(gpu_->stream(), &graph));
    TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int round = 0; round < 2; ++round) {
      // New slots and ranks (rotated) in the captured buffers, out back at its start.
      std::rotate(in.row_slots.begin(), in.row_slots.begin() + 1 + round, in.row_slots.end());
      std::rotate(in.ranks.begin(), in.ranks.begin() + in.entries, in.ranks.end());
      const cudaStream_t st = gpu_->stream();
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(step.row_slots.raw(), in.row_slots.data(),
                                         in.row_slots.size() * 4, cudaMemcpyHostToDevice, st));
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(step.ranks.raw(), in.ranks.data(), in.ranks.size() * 4,
                                         cudaMemcpyHostToDevice, st));
      Tensor start = dev(in.start);
      TACHYON_CUDA_CHECK(
          cudaMemcpyAsync(out.raw(), start.raw(), out.nbytes(), cudaMemcpyDeviceToDevice, st));
      TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, gpu_->stream()));
      gpu_->synchronize();
      std::vector<bool> touched;
      expect_near(host_values(*gpu_, out), reference(in, touched), bound_for(dt_),
                  tag("graph replay T " + std::to_string(t) + " round " + std::to_string(round)));
    }
    TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
    TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
  }
}

// A slot past the arena and a rank past the capacity: the device error, those rows left
// alone, the others updated.
TEST_P(CudaLoraTest, BadSlotOrRankRaises) {
  for (const int64_t t : {2, 100}) {
    for (const bool bad_rank : {false, true}) {
      LoraInputs in = make_inputs({t, 256, {64}, 8, 0, 0}, dt_, rng_);
      for (auto& s : in.row_slots) s = 0;
      if (bad_rank)
        in.ranks[static_cast<size_t>(in.entries + in.target.rank_index)] = 9;  // slot 1, R 8
      in.row_slots[1] = bad_rank ? 1 : kSlots;
      LoraStep step = device_step(*gpu_, in, dt_);
      Tensor out = dev(in.start);
      gpu_->lora(dev(in.x), step, in.target, out, 0);
      EXPECT_THROW(gpu_->synchronize(), Internal) << t;
      EXPECT_NO_THROW(gpu_->synchronize());  // the word was cleared
      const std::vector<double> got = host_values(*gpu_, out);
      const std::vector<double> base = host_values(in.start);
      for (int64_t c = 0; c < 64; ++c) {
        EXPECT_EQ(got[static_cast<size_t>(64 + c)], base[static_cast<size_t>(64 + c)]) << c;
      }
      EXPECT_NE(got[0], base[0]);
    }
  }
}

// Layouts the kernels cannot take are refused before anything runs.
TEST_P(CudaLoraTest, RefusesUnalignedLayouts) {
  LoraInputs in = make_inputs({4, 256, {64}, 8, 0, 0}, dt_, rng_);
  LoraStep step = device_step(*gpu_, in, dt_);
  Tensor out = dev(in.start);
  LoraTarget t = in.target;
  t.a_offset += 4;
  EXPECT_THROW(gpu_->lora(dev(in.x), step, t, out, 0), Error);
  EXPECT_EQ(host_values(*gpu_, out), host_values(in.start));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLoraTest, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace tachyon::cuda_test
