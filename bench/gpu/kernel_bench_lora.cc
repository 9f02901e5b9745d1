// The LoRA kernels' cost (tachyon_kernel_bench --only lora): one layer's adapters on all
// seven projections (q/k/v stacked in one target of three parts, o, gate/up in one of two
// parts, down) at rank 16 against the layer's four base products (bf16 linear()), at
// three steps: T = 1 with one adapter, T = 64 decoding rows over 16 adapters (tokens of
// one adapter interleaved with the others'), T = 4096 prefill rows over 4 adapters (runs of
// 1024). The arena holds 16 slots and 4 layers' adapters, rotated between calls, so that
// each call reads its A and B rows from memory rather than the L2 (the base weights,
// 218 MB a layer, stream anyway). Each step is timed as a captured graph of the layer's
// calls, replayed (what a decode step's graph sees), with CUDA events; medians.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_bench.h"

namespace tachyon::bench {
namespace {

constexpr int32_t kRank = 16, kArenaSlots = 16, kLayers = 4;

struct Target {
  const char* name;
  LoraTarget t[kLayers];
};

// Median time per replay of a graph of `fn` (captured once after a warm-up call).
template <typename Fn>
double time_graph(cuda::CudaBackend& be, int reps, Fn fn) {
  fn(0);  // scratch and tuning outside the capture
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(be.stream()));
  constexpr int kPerGraph = 8;
  cudaGraph_t g;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(be.stream(), cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kPerGraph; ++i) fn(i);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(be.stream(), &g));
  cudaGraphExec_t ge;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  const double t =
      time_calls(be, reps, [&](int) { TACHYON_CUDA_CHECK(cudaGraphLaunch(ge, be.stream())); });
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(ge));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(g));
  return t / kPerGraph;
}

}  // namespace

void lora_rates(const Dims& d, int reps) {
  CudaBackendOptions o;
  cuda::CudaBackend be(o);
  const int64_t H = d.hidden, I = d.inter, q = d.heads * d.head_dim, kv = d.kv_heads * d.head_dim;
  struct Product {
    const char* name;
    int64_t n, k;
    std::vector<int64_t> ends;
  };
  const Product products[] = {{"qkv", q + 2 * kv, H, {q, q + kv, q + 2 * kv}},
                              {"o", H, q, {H}},
                              {"gate_up", 2 * I, H, {I, 2 * I}},
                              {"down", H, I, {H}}};
  // The arena: per layer, per product, A then B.
  std::vector<Target> targets;
  int64_t off = 0;
  int32_t entry = 0;
  for (const Product& p : products) {
    Target tg{p.name, {}};
    for (int l = 0; l < kLayers; ++l) {
      LoraTarget& t = tg.t[l];
      t.n = p.n;
      t.k = p.k;
      t.parts = static_cast<int32_t>(p.ends.size());
      for (int32_t i = 0; i < t.parts; ++i) t.part_end[i] = p.ends[static_cast<size_t>(i)];
      t.rank_index = entry + l * 7;
      t.a_offset = off;
      off += t.parts * kRank * t.k;
      t.b_offset = off;
      off += t.n * kRank;
    }
    entry += static_cast<int32_t>(p.ends.size());
    targets.push_back(tg);
  }
  const int32_t entries = 7 * kLayers;
  LoraStep step;
  step.arena = upload_random(be, {kArenaSlots, off}, 3);
  step.max_rank = kRank;
  {
    std::vector<int32_t> ranks(static_cast<size_t>(kArenaSlots * entries), kRank);
    step.ranks = be.upload(ranks.data(), {kArenaSlots, entries}, DType::kI32, {});
  }
  std::vector<Tensor> weights;
  for (const Product& p : products) weights.push_back(upload_random(be, {p.n, p.k}, 5));
  struct Step {
    const char* name;
    int64_t t;
    int32_t slots;
    bool runs;  // runs of one slot (prefill) or interleaved (decode)
  };
  const Step steps[] = {
      {"T1_1slot", 1, 1, false}, {"T64_16slots", 64, 16, false}, {"T4096_4slots", 4096, 4, true}};
  std::printf("\nLoRA rank %d on 7 projections (%lld MB of adapters per slot and layer)\n", kRank,
              static_cast<long long>(off * 2 / kLayers / 1000000));
  std::printf("%-14s %10s %10s %8s  %s\n", "step", "base us", "lora us", "ratio",
              "lora per product us (qkv o gate_up down)");
  for (const Step& s : steps) {
    std::vector<int32_t> rs(static_cast<size_t>(s.t));
    for (int64_t t = 0; t < s.t; ++t)
      rs[static_cast<size_t>(t)] =
          s.runs ? static_cast<int32_t>(t * s.slots / s.t) : static_cast<int32_t>(t % s.slots);
    step.row_slots = be.upload(rs.data(), {s.t}, DType::kI32, {});
    Tensor x = upload_random(be, {s.t, I}, 9);  // the first H columns are the H-wide inputs
    Tensor xh = upload_random(be, {s.t, H}, 10);
    std::vector<Tensor> outs;
    for (const Product& p : products) outs.push_back(upload_random(be, {s.t, p.n}, 12));
    auto in_of = [&](size_t i) -> const Tensor& { return products[i].k == I ? x : xh; };
    const double base = time_graph(be, reps, [&](int) {
      for (size_t i = 0; i < 4; ++i)
        be.linear(in_of(i), weights[i], Tensor(), outs[i], 0, Activation::kIdentity);
    });
    const double lora = time_graph(be, reps, [&](int c) {
      for (size_t i = 0; i < 4; ++i) be.lora(in_of(i), step, targets[i].t[c % kLayers], outs[i], 0);
    });
    double each[4];
    for (size_t i = 0; i < 4; ++i)
      each[i] = time_graph(
          be, reps, [&](int c) { be.lora(in_of(i), step, targets[i].t[c % kLayers], outs[i], 0); });
    be.synchronize();
    std::printf("%-14s %10.2f %10.2f %7.1f%%  %.2f %.2f %.2f %.2f\n", s.name, base * 1e6,
                lora * 1e6, 100.0 * lora / base, each[0] * 1e6, each[1] * 1e6, each[2] * 1e6,
                each[3] * 1e6);
    std::printf("RESULT lora_%s_base_us %.2f lora_us %.2f ratio %.4f\n", s.name, base * 1e6,
                lora * 1e6, lora / base);
  }
  // An adapter swapped in: a whole adapter's arena row (32 layers of this shape, rank 16)
  // copied from the host memory prepared adapters live in (Backend::alloc_swap) into a
  // device slot, as the runner does (copy_blocks_between), into the slots in turn.
  {
    constexpr int64_t kModelLayers = 32;
    const int64_t row = off / kLayers * kModelLayers;
    Tensor host = be.alloc_swap({1, row}, DType::kBF16);
    std::memset(host.raw(), 0x3c, host.nbytes());
    Tensor slots = be.alloc({kArenaSlots, row}, DType::kBF16);
    const double t = time_calls(be, reps, [&](int i) {
      be.copy_blocks_between(host, slots, {{0, static_cast<int32_t>(i % kArenaSlots)}});
    });
    std::printf("adapter swap-in (%lld MB): %.3f ms (%.1f GB/s)\n",
                static_cast<long long>(host.nbytes() / 1000000), t * 1e3,
                static_cast<double>(host.nbytes()) / t / 1e9);
    std::printf("RESULT lora_swap_ms %.3f\n", t * 1e3);
  }
}

}  // namespace tachyon::bench
