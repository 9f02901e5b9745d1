// Op cases: low-rank adapters. lora() on one product (parts, ranks below the capacity
// and of zero, base-model rows, a column offset into a wider output), and the layer-level
// products with a step's adapters: attention_input (a stacked q/k/v target and separate
// ones), mlp_input (a gate/up target) and linear_residual.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

constexpr int32_t kSlots = 4;

// A product's place in the arena: n x k, its parts' ends.
struct Product {
  int64_t n, k;
  std::vector<int64_t> part_end;  // empty: one part
};

// An arena of kSlots slots for the products (A rows scaled by 1/sqrt(k), B by
// 1/sqrt(R): deltas of the order of the base products; every element nonzero, also past
// a slot's rank, which the backends must not read), and the slots' ranks: slot 0 at the
// capacity, slot 1 at half of it, slot 2 at the capacity but 0 for every second part,
// slot 3 at 3. Fills targets (one per product) and the step but for row_slots.
void make_arena(OpRun& r, const std::vector<Product>& products, int32_t R,
                std::vector<LoraTarget>& targets, LoraStep& step) {
  auto up8 = [](int64_t v) { return (v + 7) / 8 * 8; };
  int64_t off = 8;
  int32_t entries = 0;
  targets.clear();
  for (const Product& p : products) {
    LoraTarget t;
    t.n = p.n;
    t.k = p.k;
    t.parts = p.part_end.empty() ? 1 : static_cast<int32_t>(p.part_end.size());
    for (int32_t i = 0; i < t.parts; ++i) t.part_end[i] = p.part_end.empty() ? p.n : p.part_end[i];
    t.rank_index = entries;
    entries += t.parts;
    t.a_offset = off;
    off = up8(off + t.parts * R * t.k);
    t.b_offset = off;
    off = up8(off + t.n * R) + 8;
    targets.push_back(t);
  }
  const int64_t row = off;
  Tensor arena = r.randn({kSlots, row}, 0.5f);  // the gaps between the products
  for (int32_t s = 0; s < kSlots; ++s)
    for (const LoraTarget& t : targets) {
      const Tensor a = r.randn({t.parts * R * t.k}, 1.f / std::sqrt(static_cast<float>(t.k)));
      const Tensor b = r.randn({t.n * R}, 1.f / std::sqrt(static_cast<float>(R)));
      float* dst = arena.data<float>() + s * row;
      std::memcpy(dst + t.a_offset, a.data<float>(), static_cast<size_t>(a.numel()) * 4);
      std::memcpy(dst + t.b_offset, b.data<float>(), static_cast<size_t>(b.numel()) * 4);
    }
  std::vector<int32_t> ranks(static_cast<size_t>(kSlots * entries));
  for (int32_t e = 0; e < entries; ++e) {
    ranks[static_cast<size_t>(e)] = R;
    ranks[static_cast<size_t>(entries + e)] = R / 2;
    ranks[static_cast<size_t>(2 * entries + e)] = e % 2 == 1 ? 0 : R;
    ranks[static_cast<size_t>(3 * entries + e)] = 3;
  }
  Tensor rk = r.i32(ranks);
  step.arena = r.act(arena);
  step.ranks = rk.reshape({kSlots, entries});
  step.max_rank = R;
}

// Token slots: runs of one slot (a prompt's tokens) with stray tokens of other slots and
// of the base model (-1) between them, every slot and -1 among the last ones; below 8
// tokens, slots 0, 1, 2, 3 and -1 in turn.
std::vector<int32_t> token_slots(OpRun& r, int64_t T) {
  std::vector<int32_t> s(static_cast<size_t>(T));
  const std::vector<int32_t> pick = r.ints(T, -1, kSlots - 1);
  int32_t run = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (t % 37 == 0) run = pick[static_cast<size_t>(t)];
    s[static_cast<size_t>(t)] = T < 8        ? static_cast<int32_t>((t + 1) % (kSlots + 1)) - 1
                                : t % 5 == 2 ? pick[static_cast<size_t>(t)]
                                             : run;
  }
  for (int64_t t = 0; T >= 8 && t <= kSlots; ++t)
    s[static_cast<size_t>(T - 1 - t)] = static_cast<int32_t>(t) - 1;
  return s;
}

struct LoraSpec {
  int64_t tokens, k;
  std::vector<int64_t> part_end;  // the last one is N
  int32_t rank;
  int64_t col_offset, extra_cols;
};

void lora_op_cases(std::vector<OpCase>& cases) {
  const LoraSpec specs[] = {
      {1, 256, {96}, 16, 0, 0},         {5, 264, {64, 80, 96}, 8, 8, 16},
      {64, 512, {128, 200}, 16, 16, 8}, {300, 520, {64, 96, 128}, 16, 24, 0},
      {300, 256, {160}, 8, 0, 24},
  };
  for (const LoraSpec& s : specs) {
    std::string name = "lora_" + std::to_string(s.tokens) + "x" + std::to_string(s.k) + "_parts" +
                       std::to_string(s.part_end.size()) + "_r" + std::to_string(s.rank) + "_at" +
                       std::to_string(s.col_offset);
    cases.push_back({name,
                     [s](OpRun& r) {
                       const int64_t n = s.part_end.back();
                       std::vector<LoraTarget> targets;
                       LoraStep step;
                       make_arena(r, {{n, s.k, s.part_end}}, s.rank, targets, step);
                       step.row_slots = r.i32(token_slots(r, s.tokens));
                       Tensor x = r.act(r.randn({s.tokens, s.k}));
                       Tensor out = r.act(r.randn({s.tokens, s.col_offset + n + s.extra_cols}));
                       r.be().lora(x, step, targets[0], out, s.col_offset);
                       r.output("out", out);
                     },
                     {}});
  }
}

void attention_input_lora_cases(std::vector<OpCase>& cases) {
  for (const int64_t T : {int64_t{1}, int64_t{7}, int64_t{300}})
    for (const bool stacked : {true, false}) {
      cases.push_back(
          {std::string("attention_input_lora_") + (stacked ? "stacked_" : "separate_") +
               std::to_string(T),
           [T, stacked](OpRun& r) {
             const QkvLayout l{8, 2, 64};
             const int64_t K = 256;
             const float ws = 1.f / std::sqrt(static_cast<float>(K));
             Tensor x = r.scaled_rows({T, K}, 2.f);
             NormParams norm;
             norm.eps = 1e-6f;
             norm.weight = r.weight(r.randn({K}, 0.3f, 1.f));
             AttentionInput p;
             p.layout = l;
             std::vector<LoraTarget> targets;
             LoraStep step;
             if (stacked) {
               p.qkv = r.linear(r.randn({l.row_cols(), K}, ws), Tensor());
               make_arena(r,
                          {{l.row_cols(), K, {l.q_cols(), l.q_cols() + l.kv_cols(), l.row_cols()}}},
                          16, targets, step);
               p.qkv.lora = targets[0];
             } else {
               p.q = r.linear(r.randn({l.q_cols(), K}, ws), Tensor());
               p.k = r.linear(r.randn({l.kv_cols(), K}, ws), Tensor());
               p.v = r.linear(r.randn({l.kv_cols(), K}, ws), r.randn({l.kv_cols()}, 0.5f));
               make_arena(r, {{l.q_cols(), K, {}}, {l.kv_cols(), K, {}}, {l.kv_cols(), K, {}}}, 8,
                          targets, step);
               p.q.lora = targets[0];
               p.v.lora = targets[2];  // k without adapters
             }
             step.row_slots = r.i32(token_slots(r, T));
             p.rotary = RotaryStyle::kHalf;
             Tensor cs = r.f32(rotary_table(T, l.head_dim, 11));
             const int64_t bs = 16, nb = T / bs + 2;
             std::vector<int32_t> slots(static_cast<size_t>(T));
             for (int64_t t = 0; t < T; ++t)
               slots[static_cast<size_t>(t)] = static_cast<int32_t>(t + 3);
             LayerKvCache cache{r.kv(r.randn({nb, l.num_kv_heads, bs, l.head_dim})),
                                r.kv(r.randn({nb, l.num_kv_heads, bs, l.head_dim}))};
             Tensor qkv = r.out_act({T, l.row_cols()});
             r.be().attention_input(r.act(x), &norm, p, cs, Tensor(), r.i32(slots), cache, qkv,
                                    &step);
             r.output("qkv", qkv);
             r.output("k_cache", cache.k);
             r.output("v_cache", cache.v);
           },
           {}});
    }
}

void mlp_lora_cases(std::vector<OpCase>& cases) {
  for (const int64_t T : {int64_t{1}, int64_t{9}, int64_t{600}}) {
    cases.push_back({"mlp_input_lora_gated_stacked_" + std::to_string(T),
                     [T](OpRun& r) {
                       const int64_t K = 256, I = 512;
                       const float ws = 1.f / std::sqrt(static_cast<float>(K));
                       Tensor x = r.scaled_rows({T, K}, 2.f);
                       NormParams norm;
                       norm.eps = 1e-6f;
                       norm.weight = r.weight(r.randn({K}, 0.3f, 1.f));
                       MlpInput p;
                       p.gated = true;
                       p.act = Activation::kSilu;
                       p.gate_up = r.linear(r.randn({2 * I, K}, ws), Tensor());
                       std::vector<LoraTarget> targets;
                       LoraStep step;
                       make_arena(r, {{2 * I, K, {I, 2 * I}}}, 16, targets, step);
                       p.gate_up.lora = targets[0];
                       step.row_slots = r.i32(token_slots(r, T));
                       Tensor out = r.out_act({T, I});
                       r.be().mlp_input(r.act(x), &norm, p, out, &step);
                       r.output("out", out);
                     },
                     {}});
    cases.push_back({"linear_residual_lora_" + std::to_string(T),
                     [T](OpRun& r) {
                       const int64_t K = 512, N = 256;
                       const float ws = 1.f / std::sqrt(static_cast<float>(K));
                       LinearWeights w = r.linear(r.randn({N, K}, ws), Tensor());
                       std::vector<LoraTarget> targets;
                       LoraStep step;
                       make_arena(r, {{N, K, {}}}, 16, targets, step);
                       w.lora = targets[0];
                       step.row_slots = r.i32(token_slots(r, T));
                       Tensor res = r.act(r.randn({T, N}));
                       r.be().linear_residual(r.act(r.randn({T, K})), w, res, &step);
                       r.output("residual", res);
                     },
                     {}});
  }
}

}  // namespace

void add_lora_cases(std::vector<OpCase>& cases) {
  lora_op_cases(cases);
  attention_input_lora_cases(cases);
  mlp_lora_cases(cases);
}

}  // namespace tachyon::op_harness
