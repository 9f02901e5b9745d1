// Op cases: rotary, per-query scales, the paged KV cache (writes, block copies) and
// paged attention.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

using Doubles = std::vector<std::vector<double>>;

const char* style_name(RotaryStyle s) {
  switch (s) {
    case RotaryStyle::kNone:
      return "none";
    case RotaryStyle::kHalf:
      return "half";
    case RotaryStyle::kInterleaved:
      return "interleaved";
    case RotaryStyle::kHalf2D:
      return "half2d";
  }
  return "?";
}

Tensor host_i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// The rotary of backend/ops.h in float64 on qkv rows (host values), in place.
void rotate(std::vector<double>& qkv, const QkvLayout& l, const std::vector<double>& cs, int rot,
            RotaryStyle style) {
  const int64_t cols = l.row_cols(), rows = static_cast<int64_t>(qkv.size()) / cols;
  const int half = rot / 2, quarter = half / 2;
  for (int64_t t = 0; t < rows; ++t)
    for (int h = 0; h < l.num_heads + l.num_kv_heads; ++h) {
      double* v = qkv.data() + t * cols + int64_t{h} * l.head_dim;
      for (int p = 0; p < half; ++p) {
        int i0 = p, i1 = p + half;
        if (style == RotaryStyle::kInterleaved) {
          i0 = 2 * p;
          i1 = 2 * p + 1;
        } else if (style == RotaryStyle::kHalf2D) {
          i0 = (p / quarter) * half + p % quarter;
          i1 = i0 + quarter;
        }
        const double c = cs[t * rot + p], s = cs[t * rot + half + p];
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c - x1 * s;
        v[i1] = x1 * c + x0 * s;
      }
    }
}

// write_kv in float64 into host caches [nb, KV, bs, hd].
void write(const std::vector<double>& qkv, const QkvLayout& l, const std::vector<double>& slots,
           int64_t bs, std::vector<double>& k, std::vector<double>& v) {
  const int64_t cols = l.row_cols(), hd = l.head_dim;
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0) continue;
    const int64_t blk = static_cast<int64_t>(slots[t]) / bs,
                  off = static_cast<int64_t>(slots[t]) % bs;
    for (int g = 0; g < l.num_kv_heads; ++g)
      for (int64_t d = 0; d < hd; ++d) {
        const size_t c = static_cast<size_t>(((blk * l.num_kv_heads + g) * bs + off) * hd + d);
        k[c] = qkv[t * cols + l.q_cols() + g * hd + d];
        v[c] = qkv[t * cols + l.q_cols() + l.kv_cols() + g * hd + d];
      }
  }
}

void rotary_cases(std::vector<OpCase>& cases) {
  for (RotaryStyle style : {RotaryStyle::kHalf, RotaryStyle::kInterleaved, RotaryStyle::kHalf2D}) {
    for (auto [hd, rot] : {std::pair<int, int>{64, 64}, {80, 32}, {128, 128}, {256, 64}}) {
      for (int64_t n : {int64_t{29}, int64_t{2049}}) {
        if (n > 29 && hd != 128) continue;
        const QkvLayout l{8, 2, hd};
        const std::string sh =
            "hd" + std::to_string(hd) + "_rot" + std::to_string(rot) + "_t" + std::to_string(n);
        cases.push_back({std::string("rotary_") + style_name(style) + "_" + sh,
                         [l, n, rot, style](OpRun& r) {
                           Tensor qkv = r.randn({n, l.row_cols()});
                           Tensor cs = rotary_table(n, rot, 3);
                           Tensor d = r.act(qkv);
                           r.be().rotary(d, l, r.f32(cs), style, rot);
                           r.output("qkv", d);
                           r.keep("qkv", qkv);
                           r.keep("cs", cs);
                         },
                         [l, rot, style](const OpRun& r) {
                           std::vector<double> q = values(r.input("qkv"));
                           rotate(q, l, values(r.input("cs")), rot, style);
                           return Doubles{q};
                         }});
        if (n > 29) continue;
        // rotary_write_kv: rows and both caches, a skipped slot.
        cases.push_back({std::string("rotary_write_kv_") + style_name(style) + "_" + sh,
                         [l, n, rot, style](OpRun& r) {
                           const int64_t nb = 5, bs = 8;
                           Tensor qkv = r.randn({n, l.row_cols()});
                           Tensor cs = rotary_table(n, rot, 5);
                           std::vector<int32_t> slots(static_cast<size_t>(n));
                           for (int64_t t = 0; t < n; ++t)
                             slots[t] = static_cast<int32_t>((t * 7 + 3) % (nb * bs));
                           slots[2] = -1;
                           Tensor k0 = r.randn({nb, l.num_kv_heads, bs, l.head_dim});
                           Tensor v0 = r.randn({nb, l.num_kv_heads, bs, l.head_dim});
                           Tensor d = r.act(qkv);
                           LayerKvCache cache{r.kv(k0), r.kv(v0)};
                           r.be().rotary_write_kv(d, l, r.f32(cs), style, rot, r.i32(slots), cache);
                           r.output("qkv", d);
                           r.output("k_cache", cache.k);
                           r.output("v_cache", cache.v);
                           for (auto [name, t] : {std::pair<const char*, Tensor>{"qkv", qkv},
                                                  {"cs", cs},
                                                  {"k0", k0},
                                                  {"v0", v0},
                                                  {"slots", host_i32(slots)}})
                             r.keep(name, t);
                         },
                         [l, rot, style](const OpRun& r) {
                           std::vector<double> q = values(r.input("qkv"));
                           rotate(q, l, values(r.input("cs")), rot, style);
                           std::vector<double> k = values(r.input("k0")), v = values(r.input("v0"));
                           write(q, l, values(r.input("slots")), 8, k, v);
                           return Doubles{q, k, v};
                         }});
      }
    }
  }
  cases.push_back({"scale_queries_13",
                   [](OpRun& r) {
                     const QkvLayout l{4, 2, 64};
                     Tensor qkv = r.randn({13, l.row_cols()});
                     Tensor f = Tensor::empty({13}, DType::kF32);
                     for (int t = 0; t < 13; ++t)
                       f.data<float>()[t] = 1.f + 0.05f * static_cast<float>(t);
                     Tensor d = r.act(qkv);
                     r.be().scale_queries(d, l, r.f32(f));
                     r.output("qkv", d);
                     r.keep("qkv", qkv);
                     r.keep("f", f);
                   },
                   [](const OpRun& r) {
                     const QkvLayout l{4, 2, 64};
                     std::vector<double> v = values(r.input("qkv"));
                     const std::vector<double> f = values(r.input("f"));
                     for (size_t t = 0; t < f.size(); ++t)
                       for (int64_t c = 0; c < l.q_cols(); ++c) v[t * l.row_cols() + c] *= f[t];
                     return Doubles{v};
                   }});
}

void cache_cases(std::vector<OpCase>& cases) {
  for (auto [hd, n] : {std::pair<int, int64_t>{96, 12}, {128, 2049}}) {
    cases.push_back(
        {"write_kv_hd" + std::to_string(hd) + "_t" + std::to_string(n),
         [hd, n](OpRun& r) {
           const QkvLayout l{4, 2, hd};
           const int64_t bs = 5, nb = n / bs + 3;
           Tensor qkv = r.randn({n, l.row_cols()});
           std::vector<int32_t> slots(static_cast<size_t>(n));
           std::iota(slots.begin(), slots.end(), 0);
           std::shuffle(slots.begin(), slots.end(), r.rng());
           slots[4] = -1;  // skipped
           Tensor k0 = r.randn({nb, 2, bs, hd}), v0 = r.randn({nb, 2, bs, hd});
           LayerKvCache cache{r.kv(k0), r.kv(v0)};
           r.be().write_kv(r.act(qkv), l, r.i32(slots), cache);
           r.output("k_cache", cache.k, true);
           r.output("v_cache", cache.v, true);
           for (auto [name, t] : {std::pair<const char*, Tensor>{"qkv", qkv},
                                  {"k0", k0},
                                  {"v0", v0},
                                  {"slots", host_i32(slots)}})
             r.keep(name, t);
         },
         [hd](const OpRun& r) {
           std::vector<double> k = values(r.input("k0")), v = values(r.input("v0"));
           write(values(r.input("qkv")), QkvLayout{4, 2, hd}, values(r.input("slots")), 5, k, v);
           return Doubles{k, v};
         }});
  }
  // Pairs, then a chain (block 1 written, then read): pair by pair.
  const std::vector<std::pair<int32_t, int32_t>> pairs = {{0, 3}, {2, 5}, {3, 3}, {4, 1}, {1, 6}};
  cases.push_back({"copy_blocks_7",
                   [pairs](OpRun& r) {
                     Tensor c0 = r.randn({7, 2, 5, 96});
                     Tensor c = r.kv(c0);
                     r.be().copy_blocks(c, pairs);
                     r.output("cache", c, true);
                     r.keep("c0", c0);
                   },
                   [pairs](const OpRun& r) {
                     std::vector<double> c = values(r.input("c0"));
                     const size_t block = c.size() / 7;
                     for (auto [src, dst] : pairs)
                       std::copy_n(c.begin() + src * block, block, c.begin() + dst * block);
                     return Doubles{c};
                   }});
  // Blocks out to swap memory and back into a cleared cache.
  cases.push_back({"copy_blocks_between_swap",
                   [](OpRun& r) {
                     Tensor c0 = r.randn({7, 2, 5, 96});
                     Tensor cache = r.kv(c0);
                     Tensor swap = r.be().alloc_swap({4, 2, 5, 96}, cache.dtype());
                     r.be().copy_blocks_between(cache, swap, {{2, 0}, {5, 1}, {0, 3}, {6, 2}});
                     r.be().fill_zero(cache);
                     r.be().copy_blocks_between(swap, cache, {{0, 6}, {1, 3}, {3, 0}});
                     r.output("cache", cache, true);
                     r.keep("c0", c0);
                   },
                   [](const OpRun& r) {
                     const std::vector<double> c0 = values(r.input("c0"));
                     std::vector<double> c(c0.size(), 0.0);
                     const size_t block = c.size() / 7;
                     for (auto [src, dst] : {std::pair<int, int>{2, 6}, {5, 3}, {0, 0}})
                       std::copy_n(c0.begin() + src * block, block, c.begin() + dst * block);
                     return Doubles{c};
                   }});
}

// One attention step: sequences of q_lens new tokens over ctx_lens cached ones.
struct AttnSpec {
  std::string name;
  QkvLayout layout;
  int32_t block_size = 16;
  std::vector<int32_t> q_lens, ctx_lens, prefix_lens;
  float scale_mul = 1.f, softcap = 0.f;
  int32_t window = 0;
  bool alibi = false, alibi_bf16 = false;
};

AttentionParams attn_params(const AttnSpec& s) {
  AttentionParams p;
  p.scale = s.scale_mul / std::sqrt(static_cast<float>(s.layout.head_dim));
  p.softcap = s.softcap;
  p.sliding_window = s.window;
  p.alibi_scale = 0.5f;
  p.alibi_bias_bf16 = s.alibi_bf16;
  return p;
}

std::vector<float> slopes_of(const AttnSpec& s) {
  std::vector<float> v(static_cast<size_t>(s.layout.num_heads));
  for (size_t h = 0; h < v.size(); ++h) v[h] = std::pow(2.f, -8.f * (h + 1) / v.size());
  return v;
}

// The step's metadata: its sequences' queries (offsets qs), contexts and block tables
// (mb blocks each, rows of `table`).
AttentionMeta attention_meta(const AttnSpec& s, const std::vector<int32_t>& qs,
                             const std::vector<int32_t>& table, int32_t mb, OpRun& r) {
  const auto S = static_cast<int32_t>(s.q_lens.size());
  AttentionMeta m;
  m.query_start = r.i32(qs);
  m.context_lens = r.i32(s.ctx_lens);
  m.block_tables = r.be().upload(table.data(), {S, mb}, DType::kI32, {});
  m.num_seqs = S;
  m.max_blocks_per_seq = mb;
  m.max_query_len = *std::max_element(s.q_lens.begin(), s.q_lens.end());
  m.max_context_len = *std::max_element(s.ctx_lens.begin(), s.ctx_lens.end());
  m.host_query_start = &qs;
  m.host_context_lens = &s.ctx_lens;
  return m;
}

void run_attention(const AttnSpec& s, OpRun& r) {
  const QkvLayout& l = s.layout;
  const int32_t S = static_cast<int32_t>(s.q_lens.size()), bs = s.block_size;
  std::vector<int32_t> qs(1, 0);
  for (int32_t q : s.q_lens) qs.push_back(qs.back() + q);
  const int32_t T = qs.back();
  const int32_t max_ctx = *std::max_element(s.ctx_lens.begin(), s.ctx_lens.end());
  const int32_t mb = (max_ctx + bs - 1) / bs, nb = S * mb + 1;
  std::vector<int32_t> table(static_cast<size_t>(nb));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), r.rng());
  table.resize(static_cast<size_t>(S * mb));
  Tensor qkv = r.randn({T, l.row_cols()});
  Tensor k = r.randn({nb, l.num_kv_heads, bs, l.head_dim});
  Tensor v = r.randn({nb, l.num_kv_heads, bs, l.head_dim});
  const std::vector<float> slopes = slopes_of(s);
  AttentionParams p = attn_params(s);
  if (s.alibi)
    p.alibi_slopes = r.f32(
        Tensor::wrap(const_cast<float*>(slopes.data()), {l.num_heads}, DType::kF32, nullptr, {}));
  AttentionMeta m = attention_meta(s, qs, table, mb, r);
  if (!s.prefix_lens.empty()) m.prefix_lens = r.i32(s.prefix_lens);
  Tensor out = r.out_act({T, l.q_cols()});
  r.be().attention(r.act(qkv), l, LayerKvCache{r.kv(k), r.kv(v)}, m, p, out);
  r.output("out", out);
  for (auto [name, t] :
       {std::pair<const char*, Tensor>{"qkv", qkv}, {"k", k}, {"v", v}, {"table", host_i32(table)}})
    r.keep(name, t);
}

std::vector<double> attention_formula(const AttnSpec& s, const OpRun& r) {
  const QkvLayout& l = s.layout;
  const std::vector<double> qkv = values(r.input("qkv")), k = values(r.input("k")),
                            v = values(r.input("v")), table = values(r.input("table"));
  const int64_t hd = l.head_dim, cols = l.row_cols(), bs = s.block_size;
  const int64_t mb = static_cast<int64_t>(table.size()) / static_cast<int64_t>(s.q_lens.size());
  const AttentionParams p = attn_params(s);
  const std::vector<float> slopes = slopes_of(s);
  const int group = l.num_heads / l.num_kv_heads;
  std::vector<double> out;
  int64_t t = 0;
  for (size_t q = 0; q < s.q_lens.size(); ++q)
    for (int32_t i = 0; i < s.q_lens[q]; ++i, ++t) {
      const int64_t idx = s.ctx_lens[q] - s.q_lens[q] + i;
      const int64_t lo =
          p.sliding_window > 0 ? std::max<int64_t>(0, idx - p.sliding_window + 1) : 0;
      const int64_t hi = s.prefix_lens.empty() ? idx : std::max<int64_t>(idx, s.prefix_lens[q] - 1);
      for (int h = 0; h < l.num_heads; ++h) {
        const int g = h / group;
        std::vector<double> sc;
        for (int64_t j = lo; j <= hi; ++j) {
          const int64_t at =
              ((static_cast<int64_t>(table[q * mb + j / bs]) * l.num_kv_heads + g) * bs + j % bs) *
              hd;
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += qkv[t * cols + h * hd + d] * k[at + d];
          double x = dot * p.scale;
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          if (s.alibi) {
            float b = slopes[h] * static_cast<float>(j);
            if (s.alibi_bf16) b = bf16_to_f32(f32_to_bf16(b));
            x += p.alibi_scale * b;
          }
          sc.push_back(x);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double o = 0;
          for (int64_t j = lo; j <= hi; ++j) {
            const int64_t at =
                ((static_cast<int64_t>(table[q * mb + j / bs]) * l.num_kv_heads + g) * bs +
                 j % bs) *
                hd;
            o += sc[j - lo] * v[at + d];
          }
          out.push_back(o / sum);
        }
      }
    }
  return out;
}

void attention_cases(std::vector<OpCase>& cases) {
  const QkvLayout gqa{8, 2, 128}, mha{4, 4, 64}, mqa{8, 1, 80};
  // name, layout, block size, new tokens and cached tokens of each sequence, then what
  // differs from plain causal attention.
  auto spec = [](std::string name, QkvLayout l, int32_t bs, std::vector<int32_t> q,
                 std::vector<int32_t> ctx) {
    AttnSpec s;
    s.name = std::move(name);
    s.layout = l;
    s.block_size = bs;
    s.q_lens = std::move(q);
    s.ctx_lens = std::move(ctx);
    return s;
  };
  std::vector<AttnSpec> specs = {
      spec("attention_prefill_causal", gqa, 16, {37}, {37}),
      spec("attention_prefill_long_2048", QkvLayout{2, 1, 64}, 16, {2048}, {2048}),
      spec("attention_prefill_chunked_odd_blocks", mha, 7, {30, 19}, {75, 19}),
      spec("attention_decode_gqa", gqa, 16, {1, 1, 1, 1}, {1, 17, 300, 1000}),
      spec("attention_decode_mqa_hd80", mqa, 16, {1, 1}, {33, 513}),
      spec("attention_mixed", gqa, 16, {1, 5, 20, 1}, {40, 5, 60, 129}),
  };
  specs.push_back(spec("attention_sliding_window", gqa, 16, {1, 7, 30}, {200, 50, 30}));
  specs.back().window = 16;
  specs.push_back(spec("attention_softcap", mha, 16, {3, 1}, {40, 77}));
  specs.back().scale_mul = 4.f;
  specs.back().softcap = 30.f;
  for (bool bf16 : {false, true}) {
    specs.push_back(
        spec(bf16 ? "attention_alibi_bf16" : "attention_alibi", mha, 16, {9, 1}, {9, 100}));
    specs.back().alibi = true;
    specs.back().alibi_bf16 = bf16;
  }
  specs.push_back(spec("attention_bidirectional_prefix", gqa, 16, {20, 6, 1}, {20, 6, 40}));
  specs.back().prefix_lens = {12, 0, 30};
  for (const AttnSpec& s : specs)
    cases.push_back({s.name, [s](OpRun& r) { run_attention(s, r); },
                     [s](const OpRun& r) { return Doubles{attention_formula(s, r)}; }});
}

// A K or V row as the cache of type t holds it, in float64: bf16 rounded to nearest
// even; int8 as q * scale, scale = max|x| / 127 and q = x / scale rounded to nearest
// even (in f32, as the cache computes them).
void cache_rounded(DType t, double* row, int64_t hd) {
  if (t == DType::kBF16) {
    for (int64_t d = 0; d < hd; ++d) row[d] = bf16_to_f32(f32_to_bf16(static_cast<float>(row[d])));
    return;
  }
  if (t == DType::kF8E4M3) {
    for (int64_t d = 0; d < hd; ++d) row[d] = e4m3_to_f32(f32_to_e4m3(static_cast<float>(row[d])));
    return;
  }
  float mx = 0.f;
  for (int64_t d = 0; d < hd; ++d) mx = std::max(mx, std::fabs(static_cast<float>(row[d])));
  const float scale = mx / 127.f;
  for (int64_t d = 0; d < hd; ++d) {
    const float q = scale > 0.f ? std::nearbyint(static_cast<float>(row[d]) / scale) : 0.f;
    row[d] = static_cast<double>(std::clamp(q, -127.f, 127.f)) * scale;
  }
}

// The step of spec s over a cache of type t: every context token's k and v written by
// write_kv (the whole context in one call, into a zeroed cache), then attention of the
// last q_lens tokens of each sequence.
void run_quantized_attention(const AttnSpec& s, DType t, OpRun& r) {
  const QkvLayout& l = s.layout;
  const int32_t S = static_cast<int32_t>(s.q_lens.size()), bs = s.block_size;
  const int32_t max_ctx = *std::max_element(s.ctx_lens.begin(), s.ctx_lens.end());
  const int32_t mb = (max_ctx + bs - 1) / bs, nb = S * mb + 1;
  std::vector<int32_t> table(static_cast<size_t>(nb));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), r.rng());
  table.resize(static_cast<size_t>(S * mb));
  const int32_t n_ctx = std::accumulate(s.ctx_lens.begin(), s.ctx_lens.end(), 0);
  Tensor all = r.randn({n_ctx, l.row_cols()});
  std::vector<int32_t> slots, rows, qs(1, 0);
  for (int32_t q = 0, row = 0; q < S; ++q) {
    for (int32_t j = 0; j < s.ctx_lens[q]; ++j, ++row) {
      slots.push_back(table[static_cast<size_t>(q * mb + j / bs)] * bs + j % bs);
      if (j >= s.ctx_lens[q] - s.q_lens[q]) rows.push_back(row);
    }
    qs.push_back(qs.back() + s.q_lens[q]);
  }
  const int32_t T = qs.back();
  Tensor qkv = Tensor::empty({T, l.row_cols()}, DType::kF32);
  for (int32_t i = 0; i < T; ++i)
    std::copy_n(all.data<float>() + int64_t{rows[i]} * l.row_cols(), l.row_cols(),
                qkv.data<float>() + int64_t{i} * l.row_cols());
  const Shape shape = kv_cache_shape(t, nb, l.num_kv_heads, bs, l.head_dim);
  LayerKvCache cache{r.be().alloc(shape, t), r.be().alloc(shape, t)};
  r.be().fill_zero(cache.k);
  r.be().fill_zero(cache.v);
  r.be().write_kv(r.act(all), l, r.i32(slots), cache);
  AttentionMeta m = attention_meta(s, qs, table, mb, r);
  Tensor out = r.out_act({T, l.q_cols()});
  r.be().attention(r.act(qkv), l, cache, m, attn_params(s), out);
  r.output("out", out);
  if (t == DType::kBF16) {  // the cache itself: the rounded rows, bit for bit
    r.output("k_cache", cache.k, true);
    r.output("v_cache", cache.v, true);
  }
  r.keep("all", all);
  r.keep("qkv", qkv);
  r.keep("slots", host_i32(slots));
  r.keep("table", host_i32(table));
}

// The float64 reference of run_quantized_attention: the caches written with the cache's
// rounding, then attention_formula over them.
std::vector<std::vector<double>> quantized_attention_formula(const AttnSpec& s, DType t, OpRun& r) {
  const QkvLayout& l = s.layout;
  const int64_t hd = l.head_dim;
  const std::vector<double> slots = values(r.input("slots"));
  const int64_t nb = static_cast<int64_t>(values(r.input("table")).size()) + 1;
  std::vector<double> all = values(r.input("all"));
  for (int64_t i = 0; i < static_cast<int64_t>(slots.size()); ++i)
    for (int g = 0; g < 2 * l.num_kv_heads; ++g)
      cache_rounded(t, all.data() + i * l.row_cols() + l.q_cols() + g * hd, hd);
  const size_t n = static_cast<size_t>(nb * l.num_kv_heads * s.block_size * hd);
  std::vector<double> k(n, 0.0), v(n, 0.0);
  write(all, l, slots, s.block_size, k, v);
  Tensor kt = Tensor::empty({static_cast<int64_t>(n)}, DType::kF32),
         vt = Tensor::empty({static_cast<int64_t>(n)}, DType::kF32);
  for (size_t i = 0; i < n; ++i) {
    kt.data<float>()[i] = static_cast<float>(k[i]);  // exact: bf16, e4m3 or int8 x f32 scale
    vt.data<float>()[i] = static_cast<float>(v[i]);
  }
  r.keep("k", kt);
  r.keep("v", vt);
  std::vector<std::vector<double>> want = {attention_formula(s, r)};
  if (t == DType::kBF16) {
    want.push_back(k);
    want.push_back(v);
  }
  return want;
}

void quantized_cache_cases(std::vector<OpCase>& cases) {
  const QkvLayout gqa{8, 2, 128}, mha{4, 4, 64}, mqa{8, 1, 80};
  auto spec = [](std::string name, QkvLayout l, int32_t bs, std::vector<int32_t> q,
                 std::vector<int32_t> ctx, int32_t window = 0) {
    AttnSpec s;
    s.name = std::move(name);
    s.layout = l;
    s.block_size = bs;
    s.q_lens = std::move(q);
    s.ctx_lens = std::move(ctx);
    s.window = window;
    return s;
  };
  const std::vector<AttnSpec> specs = {
      spec("prefill", gqa, 16, {37}, {37}),
      spec("prefill_chunked", mha, 7, {30, 19}, {75, 19}),
      spec("decode_gqa", gqa, 16, {1, 1, 1, 1}, {1, 17, 300, 1000}),
      spec("decode_mqa_hd80", mqa, 16, {1, 1}, {33, 513}),
      spec("mixed", gqa, 16, {1, 5, 20, 1}, {40, 5, 60, 129}),
      spec("sliding_window", gqa, 16, {1, 7, 30}, {200, 50, 30}, 16),
  };
  for (DType t : {DType::kBF16, DType::kF8E4M3, DType::kI8})
    for (const AttnSpec& s : specs) {
      const char* type = t == DType::kBF16 ? "bf16" : t == DType::kI8 ? "int8" : "fp8";
      OpCase c{std::string("kv_") + type + "_" + s.name,
               [s, t](OpRun& r) { run_quantized_attention(s, t, r); },
               [s, t](const OpRun& r) {
                 OpRun copy = r;  // the formula keeps its rounded caches beside the inputs
                 return quantized_attention_formula(s, t, copy);
               }};
      c.cpu_only = true;
      cases.push_back(std::move(c));
    }
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& cases) {
  rotary_cases(cases);
  cache_cases(cases);
  attention_cases(cases);
  quantized_cache_cases(cases);
}

}  // namespace tachyon::op_harness
