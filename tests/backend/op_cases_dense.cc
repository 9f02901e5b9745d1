// Op cases: embeddings, norms, products and the element-wise ops.
#include <cmath>
#include <string>

#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

using Doubles = std::vector<std::vector<double>>;

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(x);
  }
  return s;
}

constexpr Activation kActs[] = {Activation::kIdentity, Activation::kSilu, Activation::kGelu,
                                Activation::kGeluTanh, Activation::kRelu, Activation::kQuickGelu};

void embedding_cases(std::vector<OpCase>& cases) {
  struct Shape3 {
    int64_t vocab, dim, tokens;
  };
  for (Shape3 s :
       {Shape3{1000, 96, 300}, Shape3{37, 4099, 5}, Shape3{50, 64, 1}, Shape3{512, 256, 2100}}) {
    for (bool acc : {false, true}) {
      cases.push_back(
          {"embedding_" + dims({s.vocab, s.dim, s.tokens}) + (acc ? "_accumulate" : "_assign"),
           [s, acc](OpRun& r) {
             Tensor table = r.randn({s.vocab, s.dim});
             std::vector<int32_t> ids = r.ints(s.tokens, 0, static_cast<int32_t>(s.vocab) - 3);
             ids.front() = static_cast<int32_t>(s.vocab) - 3;  // the last id reachable
             Tensor base = r.randn({s.tokens, s.dim});
             Tensor out = acc ? r.act(base) : r.out_act({s.tokens, s.dim});
             r.be().embedding(r.weight(table), r.i32(ids), 2, 1.5f, acc, out);
             r.output("out", out);
             r.keep("table", table);
             r.keep("base", base);
             Tensor idh = Tensor::empty({s.tokens}, DType::kI32);
             std::copy(ids.begin(), ids.end(), idh.data<int32_t>());
             r.keep("ids", idh);
           },
           [s, acc](const OpRun& r) {
             const std::vector<double> table = values(r.input("table")),
                                       base = values(r.input("base")), ids = values(r.input("ids"));
             std::vector<double> out(static_cast<size_t>(s.tokens * s.dim));
             for (int64_t t = 0; t < s.tokens; ++t)
               for (int64_t c = 0; c < s.dim; ++c) {
                 const size_t o = static_cast<size_t>(t * s.dim + c);
                 out[o] = 1.5 * table[static_cast<size_t>((ids[t] + 2) * s.dim + c)] +
                          (acc ? base[o] : 0.0);
               }
             return Doubles{out};
           }});
    }
  }
  // f32 rows into an f32 output in every activation dtype (the decoder gathers its
  // rotary rows this way): the same bits.
  cases.push_back({"embedding_f32_rows_70x128x513",
                   [](OpRun& r) {
                     Tensor rows = r.randn({70, 128});
                     std::vector<int32_t> pos = r.ints(513, 0, 69);
                     Tensor out = r.out({513, 128}, DType::kF32);
                     r.be().embedding(r.f32(rows), r.i32(pos), 0, 1.f, false, out);
                     r.output("out", out, true);
                   },
                   {},
                   false,
                   true});
}

// add_norm: residual rows whose scales span decades, 0/1/2 deltas, RMS and LayerNorm
// (with a bias), Gemma's weight offset; rows few (block per row) and many (the fused
// warp-per-row paths).
void norm_cases(std::vector<OpCase>& cases) {
  struct NormShape {
    int64_t rows, dim;
  };
  for (NormShape s :
       {NormShape{1, 1000}, NormShape{33, 64}, NormShape{33, 1000}, NormShape{33, 4099},
        NormShape{1100, 64}, NormShape{2049, 1000}, NormShape{2048, 4096}}) {
    for (NormType type : {NormType::kRMSNorm, NormType::kLayerNorm}) {
      for (int deltas = 0; deltas <= 2; ++deltas) {
        const float offset = deltas == 1 ? 1.f : 0.f;
        const std::string name = std::string("add_norm_") +
                                 (type == NormType::kRMSNorm ? "rms_" : "layer_") +
                                 dims({s.rows, s.dim}) + "_deltas" + std::to_string(deltas) +
                                 (offset != 0 ? "_offset" : "");
        cases.push_back(
            {name,
             [s, type, deltas, offset](OpRun& r) {
               Tensor res = r.scaled_rows({s.rows, s.dim}, 2.f);
               Tensor d1 = r.randn({s.rows, s.dim}), d2 = r.randn({s.rows, s.dim});
               Tensor w = r.randn({s.dim}, 0.5f, offset != 0 ? 0.f : 1.f);
               Tensor b = r.randn({s.dim}, 0.2f);
               NormParams p;
               p.type = type;
               p.eps = 1e-5f;
               p.weight_offset = offset;
               p.weight = r.weight(w);
               if (type == NormType::kLayerNorm) p.bias = r.weight(b);
               Tensor rd = r.act(res), out = r.out_act({s.rows, s.dim});
               r.be().add_norm(rd, deltas > 0 ? r.act(d1) : Tensor(),
                               deltas > 1 ? r.act(d2) : Tensor(), p, out);
               r.output("out", out);
               r.output("residual", rd);
               // In place: out is the residual.
               Tensor rd2 = r.act(res);
               r.be().add_norm(rd2, deltas > 0 ? r.act(d1) : Tensor(), Tensor(), p, rd2);
               r.output("in_place", rd2);
               for (auto [n, t] : {std::pair<const char*, Tensor>{"res", res},
                                   {"d1", d1},
                                   {"d2", d2},
                                   {"w", w},
                                   {"b", b}})
                 r.keep(n, t);
             },
             [s, type, deltas, offset](const OpRun& r) {
               const std::vector<double> res = values(r.input("res")), d1 = values(r.input("d1")),
                                         d2 = values(r.input("d2")), w = values(r.input("w")),
                                         b = values(r.input("b"));
               Doubles o(3, std::vector<double>(res.size()));
               for (int pass = 0; pass < 2; ++pass) {
                 const int nd = pass == 0 ? deltas : std::min(deltas, 1);
                 for (int64_t t = 0; t < s.rows; ++t) {
                   std::vector<double> x(static_cast<size_t>(s.dim));
                   double mean = 0, sq = 0;
                   for (int64_t c = 0; c < s.dim; ++c) {
                     const size_t i = static_cast<size_t>(t * s.dim + c);
                     x[c] = res[i] + (nd > 0 ? d1[i] : 0) + (nd > 1 ? d2[i] : 0);
                     mean += x[c] / s.dim;
                   }
                   if (type == NormType::kRMSNorm) mean = 0;
                   for (double v : x) sq += (v - mean) * (v - mean) / s.dim;
                   const double inv = 1 / std::sqrt(sq + 1e-5);
                   for (int64_t c = 0; c < s.dim; ++c) {
                     const size_t i = static_cast<size_t>(t * s.dim + c);
                     const double y = (x[c] - mean) * inv * (offset + w[c]) +
                                      (type == NormType::kLayerNorm ? b[c] : 0);
                     if (pass == 0) {
                       o[0][i] = y;
                       o[1][i] = x[c];
                     } else {
                       o[2][i] = y;
                     }
                   }
                 }
               }
               return o;
             }});
      }
    }
  }
  for (int hd : {64, 80, 128, 256}) {
    cases.push_back({"qk_norm_hd" + std::to_string(hd),
                     [hd](OpRun& r) {
                       const QkvLayout layout{6, 2, hd};
                       Tensor qkv = r.scaled_rows({17, layout.row_cols()}, 1.f);
                       NormParams qn, kn;
                       Tensor qw = r.randn({hd}, 0.3f, 1.f), kw = r.randn({hd}, 0.3f, 1.f);
                       qn.weight = r.weight(qw);
                       kn.weight = r.weight(kw);
                       qn.eps = kn.eps = 1e-6f;
                       Tensor g = r.act(qkv);
                       r.be().qk_norm(g, layout, qn, kn);
                       r.output("qkv", g);
                       r.keep("qkv", qkv);
                       r.keep("qw", qw);
                       r.keep("kw", kw);
                     },
                     [hd](const OpRun& r) {
                       // Each q and k head RMS-normed with its weight; v untouched.
                       const QkvLayout l{6, 2, hd};
                       std::vector<double> v = values(r.input("qkv"));
                       const std::vector<double> qw = values(r.input("qw")),
                                                 kw = values(r.input("kw"));
                       for (size_t h0 = 0; h0 < v.size(); h0 += hd) {
                         const int64_t head =
                             static_cast<int64_t>(h0 / hd) % (l.num_heads + 2 * l.num_kv_heads);
                         if (head >= l.num_heads + l.num_kv_heads) continue;  // v
                         const std::vector<double>& w = head < l.num_heads ? qw : kw;
                         double sq = 0;
                         for (int d = 0; d < hd; ++d) sq += v[h0 + d] * v[h0 + d] / hd;
                         const double inv = 1 / std::sqrt(sq + 1e-6);
                         for (int d = 0; d < hd; ++d) v[h0 + d] *= inv * w[d];
                       }
                       return Doubles{v};
                     }});
  }
}

// linear: out[:, off : off + N] = act(x wᵀ + b); ragged shapes, one row (the
// matrix-vector kernel), many rows, k no multiple of 64, every activation.
void linear_cases(std::vector<OpCase>& cases) {
  struct Mnk {
    int64_t m, n, k;
  };
  for (Mnk s :
       {Mnk{1, 1, 1}, Mnk{1, 4096, 512}, Mnk{7, 33, 70}, Mnk{2049, 257, 96}, Mnk{64, 128, 64},
        Mnk{5, 512, 4096}, Mnk{2, 129, 2056}, Mnk{3, 1000, 4104}, Mnk{4, 7, 64}}) {
    for (Activation act : kActs) {
      for (bool bias : {false, true}) {
        if (act != Activation::kIdentity && s.m * s.n * s.k > (1 << 22) && bias) continue;
        const int64_t off = s.n % 2 == 0 ? 8 : 3, cols = s.n + off + 5;
        cases.push_back(
            {"linear_" + dims({s.m, s.n, s.k}) + "_" + activation_name(act) + (bias ? "_bias" : ""),
             [s, act, bias, off, cols](OpRun& r) {
               Tensor x = r.randn({s.m, s.k});
               Tensor w = r.randn({s.n, s.k}, 1.f / std::sqrt(static_cast<float>(s.k)));
               Tensor b = r.randn({s.n}, 0.5f);
               Tensor out = r.out_act({s.m, cols});
               r.be().linear(r.act(x), r.linear_weight(w), bias ? r.weight(b) : Tensor(), out, off,
                             act);
               // Only the written columns (the others stay NaN).
               Tensor h = Tensor::empty({s.m, cols}, out.dtype());
               r.be().download(out, h.raw());
               Tensor cut = Tensor::empty({s.m, s.n}, DType::kF32);
               for (int64_t i = 0; i < s.m; ++i)
                 for (int64_t j = 0; j < s.n; ++j)
                   cut.data<float>()[i * s.n + j] =
                       load_as_f32(h.raw(), h.dtype(), static_cast<size_t>(i * cols + off + j));
               r.output("out", cut);
               r.keep("x", x);
               r.keep("w", w);
               r.keep("b", b);
             },
             [s, act, bias](const OpRun& r) {
               const std::vector<double> x = values(r.input("x")), w = values(r.input("w")),
                                         b = values(r.input("b"));
               std::vector<double> o(static_cast<size_t>(s.m * s.n));
               for (int64_t i = 0; i < s.m; ++i)
                 for (int64_t j = 0; j < s.n; ++j) {
                   double acc = bias ? b[j] : 0;
                   for (int64_t k = 0; k < s.k; ++k) acc += x[i * s.k + k] * w[j * s.k + k];
                   o[static_cast<size_t>(i * s.n + j)] = activate(act, acc);
                 }
               return Doubles{o};
             }});
      }
    }
  }
  // Logits: activation-dtype input, f32 output.
  for (int64_t rows : {1, 4, 9}) {
    for (bool bias : {false, true}) {
      cases.push_back({"linear_logits_f32_" + dims({rows, 32000, 256}) + (bias ? "_bias" : ""),
                       [rows, bias](OpRun& r) {
                         Tensor x = r.randn({rows, 256});
                         Tensor w = r.randn({32000, 256}, 0.0625f);
                         Tensor b = r.randn({32000}, 0.5f);
                         Tensor out = r.out({rows, 32000}, DType::kF32);
                         r.be().linear(r.act(x), r.linear_weight(w), bias ? r.weight(b) : Tensor(),
                                       out);
                         r.output("logits", out);
                       },
                       {},
                       false,
                       true});
    }
  }
  // The last: deep enough, and rows enough, for the add in the wgmma GEMM's epilogue.
  for (Mnk s : {Mnk{1, 64, 128}, Mnk{2, 129, 256}, Mnk{64, 4096, 512}, Mnk{2049, 257, 96},
                Mnk{2048, 128, 8192}}) {
    for (bool bias : {false, true}) {
      cases.push_back({"linear_residual_" + dims({s.m, s.n, s.k}) + (bias ? "_bias" : ""),
                       [s, bias](OpRun& r) {
                         Tensor x = r.randn({s.m, s.k});
                         Tensor w = r.randn({s.n, s.k}, 1.f / std::sqrt(static_cast<float>(s.k)));
                         Tensor b = r.randn({s.n}, 0.5f);
                         Tensor res = r.act(r.randn({s.m, s.n}, 2.f));
                         r.be().linear_residual(r.act(x), r.linear(w, bias ? b : Tensor()), res,
                                                nullptr);
                         r.output("residual", res);
                       },
                       {}});
    }
  }
}

void elementwise_cases(std::vector<OpCase>& cases) {
  for (auto [rows, inter] : {std::pair<int64_t, int64_t>{37, 1000}, {5, 1001}, {2049, 256}}) {
    for (Activation act : kActs) {
      cases.push_back({"gated_activation_" + dims({rows, inter}) + "_" + activation_name(act),
                       [rows, inter, act](OpRun& r) {
                         Tensor in = r.randn({rows, 2 * inter}, 2.f);
                         Tensor out = r.out_act({rows, inter});
                         r.be().gated_activation(r.act(in), act, out);
                         r.output("out", out);
                         r.keep("in", in);
                       },
                       [rows, inter, act](const OpRun& r) {
                         const std::vector<double> in = values(r.input("in"));
                         std::vector<double> o(static_cast<size_t>(rows * inter));
                         for (int64_t t = 0; t < rows; ++t)
                           for (int64_t i = 0; i < inter; ++i)
                             o[t * inter + i] = activate(act, in[t * 2 * inter + i]) *
                                                in[t * 2 * inter + inter + i];
                         return Doubles{o};
                       }});
      cases.push_back({"activation_" + dims({rows, inter}) + "_" + activation_name(act),
                       [rows, inter, act](OpRun& r) {
                         Tensor in = r.randn({rows, inter}, 2.f);
                         Tensor x = r.act(in);
                         r.be().activation(x, act);
                         r.output("x", x);
                         r.keep("in", in);
                       },
                       [act](const OpRun& r) {
                         std::vector<double> v = values(r.input("in"));
                         for (double& x : v) x = activate(act, x);
                         return Doubles{v};
                       }});
    }
  }
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 1000}, {1, 7}, {2049, 130}}) {
    const std::string sh = dims({rows, cols});
    // add, scale_add (out = b), softcap, clamp, add_sigmoid_gated
    cases.push_back({"add_" + sh,
                     [rows, cols](OpRun& r) {
                       Tensor a = r.randn({rows, cols}), b = r.randn({rows, cols});
                       Tensor out = r.out_act({rows, cols});
                       r.be().add(r.act(a), r.act(b), out);
                       r.output("out", out);
                       r.keep("a", a);
                       r.keep("b", b);
                     },
                     [](const OpRun& r) {
                       std::vector<double> a = values(r.input("a")), b = values(r.input("b"));
                       for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
                       return Doubles{a};
                     }});
    cases.push_back({"scale_add_" + sh,
                     [rows, cols](OpRun& r) {
                       Tensor a = r.randn({rows, cols}), b = r.randn({rows, cols});
                       Tensor bd = r.act(b);
                       r.be().scale_add(r.act(a), 5.29f, bd, bd);
                       r.output("out", bd);
                       r.keep("a", a);
                       r.keep("b", b);
                     },
                     [](const OpRun& r) {
                       std::vector<double> a = values(r.input("a")), b = values(r.input("b"));
                       for (size_t i = 0; i < a.size(); ++i) a[i] = 5.29f * a[i] + b[i];
                       return Doubles{a};
                     }});
    cases.push_back({"softcap_" + sh,
                     [rows, cols](OpRun& r) {
                       Tensor x = r.randn({rows, cols}, 30.f);
                       Tensor d = r.act(x);
                       r.be().softcap(d, 20.f);
                       r.output("x", d);
                       r.keep("x", x);
                     },
                     [](const OpRun& r) {
                       std::vector<double> v = values(r.input("x"));
                       for (double& x : v) x = 20 * std::tanh(x / 20);
                       return Doubles{v};
                     }});
    cases.push_back({"clamp_" + sh,
                     [rows, cols](OpRun& r) {
                       Tensor x = r.randn({rows, cols}, 30.f);
                       Tensor d = r.act(x);
                       r.be().clamp(d, 25.f);
                       r.output("x", d);
                       r.keep("x", x);
                     },
                     [](const OpRun& r) {
                       std::vector<double> v = values(r.input("x"));
                       for (double& x : v) x = std::clamp(x, -25.0, 25.0);
                       return Doubles{v};
                     }});
    cases.push_back({"add_sigmoid_gated_" + sh,
                     [rows, cols](OpRun& r) {
                       Tensor src = r.randn({rows, cols}), gate = r.randn({rows, 1}, 2.f);
                       Tensor base = r.randn({rows, cols});
                       Tensor out = r.act(base);
                       r.be().add_sigmoid_gated(r.act(src), r.act(gate), out);
                       r.output("out", out);
                       r.keep("src", src);
                       r.keep("gate", gate);
                       r.keep("base", base);
                     },
                     [cols](const OpRun& r) {
                       std::vector<double> o = values(r.input("base"));
                       const std::vector<double> s = values(r.input("src")),
                                                 g = values(r.input("gate"));
                       for (size_t i = 0; i < o.size(); ++i)
                         o[i] += s[i] / (1 + std::exp(-g[i / static_cast<size_t>(cols)]));
                       return Doubles{o};
                     }});
    cases.push_back({"gather_rows_" + sh,
                     [rows, cols](OpRun& r) {
                       Tensor src = r.randn({rows, cols});
                       std::vector<int32_t> pick = r.ints(5, 0, static_cast<int32_t>(rows) - 1);
                       pick[0] = static_cast<int32_t>(rows) - 1;
                       pick[1] = 0;
                       pick[3] = pick[2];  // a row twice
                       Tensor out = r.out_act({5, cols});
                       r.be().gather_rows(r.act(src), r.i32(pick), out);
                       r.output("out", out, true);
                       r.keep("src", src);
                       Tensor ph = Tensor::empty({5}, DType::kI32);
                       std::copy(pick.begin(), pick.end(), ph.data<int32_t>());
                       r.keep("rows", ph);
                     },
                     [cols](const OpRun& r) {
                       const std::vector<double> src = values(r.input("src")),
                                                 rows = values(r.input("rows"));
                       std::vector<double> o;
                       for (double row : rows)
                         o.insert(o.end(), src.begin() + static_cast<int64_t>(row) * cols,
                                  src.begin() + (static_cast<int64_t>(row) + 1) * cols);
                       return Doubles{o};
                     }});
  }
  // ids[pairs[j][0]] = src[pairs[j][1]] (0 for a negative source); pairs out of range
  // skipped.
  cases.push_back({"scatter_ids_9",
                   [](OpRun& r) {
                     std::vector<int32_t> ids = r.ints(9, 0, 50000), src = r.ints(6, 0, 50000);
                     src[3] = -1;
                     const std::vector<int32_t> pairs = {0, 2, 4, 3, 8, 5, 9, 0, 1, 6, -1, 0, 5, 1};
                     Tensor idd = r.i32(ids);
                     Tensor p = r.be().upload(pairs.data(), {7, 2}, DType::kI32, {});
                     r.be().scatter_ids(r.i32(src), p, idd);
                     r.output("ids", idd, true);
                     Tensor h = Tensor::empty({9}, DType::kI32);
                     std::copy(ids.begin(), ids.end(), h.data<int32_t>());
                     r.keep("ids", h);
                     Tensor s = Tensor::empty({6}, DType::kI32);
                     std::copy(src.begin(), src.end(), s.data<int32_t>());
                     r.keep("src", s);
                   },
                   [](const OpRun& r) {
                     std::vector<double> ids = values(r.input("ids"));
                     const std::vector<double> src = values(r.input("src"));
                     for (auto [to, from] : {std::pair<int, int>{0, 2}, {4, 3}, {8, 5}, {5, 1}})
                       ids[to] = src[from] < 0 ? 0 : src[from];
                     return Doubles{ids};
                   }});
}

}  // namespace

void add_dense_cases(std::vector<OpCase>& cases) {
  embedding_cases(cases);
  norm_cases(cases);
  linear_cases(cases);
  elementwise_cases(cases);
}

}  // namespace tachyon::op_harness
