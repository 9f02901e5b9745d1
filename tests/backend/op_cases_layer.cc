// Op cases: the layer-level products (attention_input, mlp_input), with and without
// their input norm, the norm folded into the products' weights where the backend does
// that (prepare_input_norm).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

enum class InNorm : uint8_t { kNone, kRms, kLayer, kFolded };

const char* norm_name(InNorm n) {
  switch (n) {
    case InNorm::kNone:
      return "nonorm";
    case InNorm::kRms:
      return "rms";
    case InNorm::kLayer:
      return "layernorm";
    case InNorm::kFolded:
      return "folded";
  }
  return "?";
}

// The input rows x [T, K] (row scales spanning decades where a norm reads them) and the
// norm, prepared.
NormParams input_norm(OpRun& r, InNorm kind, int64_t k) {
  NormParams n;
  n.type = kind == InNorm::kLayer ? NormType::kLayerNorm : NormType::kRMSNorm;
  n.eps = 1e-6f;
  n.weight = r.weight(r.randn({k}, 0.3f, 1.f));
  if (kind == InNorm::kLayer) n.bias = r.weight(r.randn({k}, 0.2f));
  return n;
}

struct AttnInputSpec {
  std::string name;
  QkvLayout layout;
  int64_t tokens, k;
  InNorm norm = InNorm::kRms;
  bool stacked = true, bias = false;
  RotaryStyle rotary = RotaryStyle::kHalf;
  int rot = 0;  // 0: head_dim
  float clip = 0.f;
  bool qk_norm = false, logn = false;
};

void run_attention_input(const AttnInputSpec& s, OpRun& r) {
  const QkvLayout& l = s.layout;
  const int64_t T = s.tokens, K = s.k;
  const float ws = 1.f / std::sqrt(static_cast<float>(K));
  Tensor x = s.norm == InNorm::kNone ? r.randn({T, K}) : r.scaled_rows({T, K}, 2.f);
  NormParams norm;
  if (s.norm != InNorm::kNone) norm = input_norm(r, s.norm, K);
  AttentionInput p;
  p.layout = l;
  auto bias = [&](int64_t n) { return s.bias ? r.randn({n}, 0.5f) : Tensor(); };
  if (s.stacked) {
    p.qkv = r.linear(r.randn({l.row_cols(), K}, ws), bias(l.row_cols()));
  } else {
    p.q = r.linear(r.randn({l.q_cols(), K}, ws), bias(l.q_cols()));
    p.k = r.linear(r.randn({l.kv_cols(), K}, ws), bias(l.kv_cols()));
    p.v = r.linear(r.randn({l.kv_cols(), K}, ws), bias(l.kv_cols()));
  }
  p.clip = s.clip;
  if (s.qk_norm) {
    p.q_norm.weight = r.weight(r.randn({l.head_dim}, 0.3f, 1.f));
    p.k_norm.weight = r.weight(r.randn({l.head_dim}, 0.3f, 1.f));
    p.q_norm.eps = p.k_norm.eps = 1e-6f;
  }
  p.rotary = s.rotary;
  if (s.norm == InNorm::kFolded) {
    std::vector<Tensor*> readers;
    for (LinearWeights* w : {&p.qkv, &p.q, &p.k, &p.v})
      if (*w) readers.push_back(&w->w);
    r.be().prepare_input_norm(norm, readers);
  }
  const int rot = s.rot > 0 ? s.rot : l.head_dim;
  Tensor cs = s.rotary != RotaryStyle::kNone ? r.f32(rotary_table(T, rot, 11)) : Tensor();
  Tensor logn;
  if (s.logn) {
    Tensor f = Tensor::empty({T}, DType::kF32);
    for (int64_t t = 0; t < T; ++t) f.data<float>()[t] = 1.f + 0.01f * static_cast<float>(t % 50);
    logn = r.f32(f);
  }
  const int64_t bs = 16, nb = T / bs + 2;
  std::vector<int32_t> slots(static_cast<size_t>(T));
  std::iota(slots.begin(), slots.end(), 3);
  std::shuffle(slots.begin(), slots.end(), r.rng());
  if (T > 2) slots[1] = -1;  // skipped
  LayerKvCache cache{r.kv(r.randn({nb, l.num_kv_heads, bs, l.head_dim})),
                     r.kv(r.randn({nb, l.num_kv_heads, bs, l.head_dim}))};
  Tensor xd = r.act(x);
  Tensor qkv = r.out_act({T, l.row_cols()});
  r.be().attention_input(xd, s.norm == InNorm::kNone ? nullptr : &norm, p, cs, logn, r.i32(slots),
                         cache, qkv, nullptr);
  r.output("qkv", qkv);
  r.output("k_cache", cache.k);
  r.output("v_cache", cache.v);
  r.output("x", xd);  // untouched
}

void attention_input_cases(std::vector<OpCase>& cases) {
  const QkvLayout gqa{8, 2, 64}, big{16, 4, 128};
  const std::vector<AttnInputSpec> specs = {
      {"attention_input_stacked_rms_half", gqa, 7, 256, InNorm::kRms, true, true},
      {"attention_input_one_row", gqa, 1, 256, InNorm::kRms, true, false},
      {"attention_input_separate_layernorm_interleaved", gqa, 9, 200, InNorm::kLayer, false, true,
       RotaryStyle::kInterleaved},
      {"attention_input_clip_qk_norm_logn", gqa, 13, 256, InNorm::kRms, true, false,
       RotaryStyle::kHalf, 0, 2.f, true, true},
      {"attention_input_partial_rotary", gqa, 11, 192, InNorm::kRms, true, true, RotaryStyle::kHalf,
       32},
      {"attention_input_half2d", gqa, 6, 128, InNorm::kLayer, true, true, RotaryStyle::kHalf2D, 32},
      {"attention_input_no_rotary_no_norm", gqa, 5, 100, InNorm::kNone, true, true,
       RotaryStyle::kNone},
      {"attention_input_separate_no_norm", gqa, 5, 256, InNorm::kNone, false, false},
      {"attention_input_folded_norm", gqa, 17, 256, InNorm::kFolded, true, false},
      {"attention_input_folded_norm_separate", gqa, 3, 256, InNorm::kFolded, false, false},
      {"attention_input_folded_norm_2049", big, 2049, 1024, InNorm::kFolded, true, false},
      {"attention_input_rms_2049", big, 2049, 1024, InNorm::kRms, true, true},
  };
  for (const AttnInputSpec& s : specs)
    cases.push_back({s.name, [s](OpRun& r) { run_attention_input(s, r); }, {}});
}

struct MlpSpec {
  int64_t tokens, k, inter;
  InNorm norm;
  bool gated, stacked;
  Activation act;
};

void mlp_input_cases(std::vector<OpCase>& cases) {
  const MlpSpec specs[] = {
      {7, 256, 512, InNorm::kRms, true, true, Activation::kSilu},
      {1, 256, 512, InNorm::kRms, true, true, Activation::kSilu},
      {9, 200, 1001, InNorm::kLayer, true, false, Activation::kGeluTanh},
      {5, 128, 300, InNorm::kNone, true, true, Activation::kGelu},
      {6, 256, 384, InNorm::kRms, false, false, Activation::kGelu},
      {3, 96, 100, InNorm::kNone, false, false, Activation::kRelu},
      {17, 256, 512, InNorm::kFolded, true, true, Activation::kSilu},
      {4, 256, 512, InNorm::kFolded, true, false, Activation::kQuickGelu},
      {600, 512, 768, InNorm::kRms, true, true, Activation::kSilu},
      {600, 512, 768, InNorm::kFolded, true, true, Activation::kSilu},
      {2049, 1024, 1536, InNorm::kFolded, true, true, Activation::kSilu},
      {2049, 1024, 1000, InNorm::kRms, true, true, Activation::kSilu},
  };
  for (const MlpSpec& s : specs) {
    const std::string name =
        std::string("mlp_input_") +
        (s.gated ? (s.stacked ? "gated_stacked_" : "gated_separate_") : "ungated_") +
        norm_name(s.norm) + "_" + std::to_string(s.tokens) + "x" + std::to_string(s.k) + "x" +
        std::to_string(s.inter) + "_" + activation_name(s.act);
    cases.push_back({name,
                     [s](OpRun& r) {
                       const float ws = 1.f / std::sqrt(static_cast<float>(s.k));
                       Tensor x = s.norm == InNorm::kNone ? r.randn({s.tokens, s.k})
                                                          : r.scaled_rows({s.tokens, s.k}, 2.f);
                       NormParams norm;
                       if (s.norm != InNorm::kNone) norm = input_norm(r, s.norm, s.k);
                       MlpInput p;
                       p.gated = s.gated;
                       p.act = s.act;
                       if (s.gated && s.stacked) {
                         p.gate_up = r.linear(r.randn({2 * s.inter, s.k}, ws), Tensor());
                       } else {
                         if (s.gated) p.gate = r.linear(r.randn({s.inter, s.k}, ws), Tensor());
                         p.up = r.linear(r.randn({s.inter, s.k}, ws), r.randn({s.inter}, 0.3f));
                       }
                       if (s.norm == InNorm::kFolded) {
                         std::vector<Tensor*> readers;
                         for (LinearWeights* w : {&p.gate_up, &p.gate, &p.up})
                           if (*w) readers.push_back(&w->w);
                         r.be().prepare_input_norm(norm, readers);
                       }
                       Tensor out = r.out_act({s.tokens, s.inter});
                       r.be().mlp_input(r.act(x), s.norm == InNorm::kNone ? nullptr : &norm, p, out,
                                        nullptr);
                       r.output("out", out);
                     },
                     {}});
  }
}

}  // namespace

void add_layer_cases(std::vector<OpCase>& cases) {
  attention_input_cases(cases);
  mlp_input_cases(cases);
}

}  // namespace tachyon::op_harness
