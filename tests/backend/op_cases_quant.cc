// Op cases: products with quantized weights (core/quant.h): int4 and int8 in groups
// (symmetric and with zeros, act-order permutations), fp8 in blocks, for linear() and
// moe_experts(), held to a float64 product with the dequantized weights. Every name
// starts with "quant_" (a backend without quantized kernels can tell them apart).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend/op_harness.h"
#include "core/quant.h"

namespace tachyon::op_harness {
namespace {

using Doubles = std::vector<std::vector<double>>;

// How a case quantizes its weights.
struct QuantSpec {
  int bits = 4;         // 4, 8; 0: fp8
  int64_t group = 0;    // integers: 0 is per channel; fp8: block_k (0: k)
  int64_t block_n = 1;  // fp8
  bool symmetric = true;
  bool perm = false;

  std::string name() const {
    std::string s;
    if (bits == 0) {
      s = "fp8_b" + std::to_string(block_n) + "x" + (group == 0 ? "k" : std::to_string(group));
    } else {
      s = "int" + std::to_string(bits) + "_" + (group == 0 ? "pc" : "g" + std::to_string(group)) +
          (symmetric ? "_sym" : "_asym");
    }
    return perm ? s + "_perm" : s;
  }
};

// A random [n, k] matrix quantized as `q` (as a view), its dequantized values kept
// under `name` for the formula.
Tensor quant_weight(OpRun& r, const QuantSpec& q, int64_t n, int64_t k, const std::string& name) {
  const Tensor dense = r.randn({n, k}, 1.f / std::sqrt(static_cast<float>(k)));
  std::shared_ptr<QuantizedMatrix> m;
  if (q.bits == 0) {
    m = quantize_fp8(dense, q.block_n == 0 ? n : q.block_n, q.group == 0 ? k : q.group);
  } else {
    m = quantize_int(dense, q.bits, q.group == 0 ? k : q.group, q.symmetric);
  }
  if (q.perm) {
    std::vector<int32_t> p(static_cast<size_t>(k));
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), r.rng());
    m->perm = Tensor::empty({k}, DType::kI32);
    std::copy(p.begin(), p.end(), m->perm.data<int32_t>());
  }
  m->validate();
  r.keep(name, dequantize(*m));
  return quantized_view(m);
}

void linear_cases(std::vector<OpCase>& cases) {
  struct Case {
    QuantSpec q;
    int64_t m, n, k;
    bool bias;
    Activation act;
  };
  const Case table[] = {
      {{4, 128, 1, true, false}, 1, 1000, 512, false, Activation::kIdentity},
      {{4, 128, 1, true, false}, 600, 300, 512, true, Activation::kIdentity},
      {{4, 32, 1, false, true}, 5, 77, 256, true, Activation::kIdentity},
      {{4, 32, 1, false, true}, 70, 77, 256, false, Activation::kIdentity},
      {{4, 64, 1, false, false}, 600, 257, 512, true, Activation::kSilu},
      {{4, 0, 1, true, false}, 17, 300, 384, false, Activation::kIdentity},
      {{4, 35, 1, false, false}, 3, 40, 70, false, Activation::kIdentity},
      {{4, 35, 1, false, false}, 1, 40, 70, false, Activation::kIdentity},
      {{4, 6, 1, false, false}, 1, 40, 96, true, Activation::kIdentity},
      {{4, 6, 1, true, false}, 2, 40, 96, false, Activation::kIdentity},
      {{4, 35, 1, true, false}, 33, 40, 70, true, Activation::kIdentity},
      {{8, 0, 1, true, false}, 1, 2048, 1024, false, Activation::kIdentity},
      {{8, 0, 1, true, false}, 8, 130, 1000, true, Activation::kGelu},
      {{8, 128, 1, false, true}, 9, 130, 256, true, Activation::kIdentity},
      {{8, 64, 1, true, false}, 600, 200, 320, false, Activation::kIdentity},
      {{8, 0, 1, false, false}, 2, 33, 100, false, Activation::kIdentity},
      {{0, 0, 1, true, false}, 1, 512, 1024, false, Activation::kIdentity},
      {{0, 128, 128, true, false}, 600, 300, 640, true, Activation::kIdentity},
      {{0, 50, 7, true, false}, 4, 45, 130, false, Activation::kIdentity},
      {{0, 50, 7, true, false}, 40, 45, 130, true, Activation::kIdentity},
      {{0, 0, 0, true, false}, 16, 64, 96, false, Activation::kIdentity},
  };
  for (const Case& c : table) {
    const std::string name = "quant_linear_" + c.q.name() + "_" + std::to_string(c.m) + "x" +
                             std::to_string(c.n) + "x" + std::to_string(c.k) +
                             (c.bias ? "_bias" : "") + "_" + activation_name(c.act);
    const int64_t off = 3, cols = c.n + off + 2;
    cases.push_back({name,
                     [c, off, cols](OpRun& r) {
                       const Tensor x = r.randn({c.m, c.k});
                       const Tensor b = r.randn({c.n}, 0.5f);
                       const Tensor w = quant_weight(r, c.q, c.n, c.k, "w");
                       Tensor out = r.out_act({c.m, cols});
                       r.be().linear(r.act(x), r.linear_weight(w), c.bias ? r.weight(b) : Tensor(),
                                     out, off, c.act);
                       Tensor h = Tensor::empty({c.m, cols}, out.dtype());
                       r.be().download(out, h.raw());
                       Tensor cut = Tensor::empty({c.m, c.n}, DType::kF32);
                       for (int64_t i = 0; i < c.m; ++i)
                         for (int64_t j = 0; j < c.n; ++j)
                           cut.data<float>()[i * c.n + j] = load_as_f32(
                               h.raw(), h.dtype(), static_cast<size_t>(i * cols + off + j));
                       r.output("out", cut);
                       r.keep("x", x);
                       r.keep("b", b);
                     },
                     [c](const OpRun& r) {
                       const std::vector<double> x = values(r.input("x")), w = values(r.input("w")),
                                                 b = values(r.input("b"));
                       std::vector<double> o(static_cast<size_t>(c.m * c.n));
                       for (int64_t i = 0; i < c.m; ++i)
                         for (int64_t j = 0; j < c.n; ++j) {
                           double acc = c.bias ? b[j] : 0;
                           for (int64_t k = 0; k < c.k; ++k) acc += x[i * c.k + k] * w[j * c.k + k];
                           o[static_cast<size_t>(i * c.n + j)] = activate(c.act, acc);
                         }
                       return Doubles{o};
                     }});
  }
}

// Experts of int4 / int8 / fp8 weights (gate_up fused or not), tokens few (one or two
// a expert: the streaming kernels) and many (the blocked GEMM).
void moe_cases(std::vector<OpCase>& cases) {
  struct Case {
    QuantSpec q;
    bool fused;
    int64_t n;
  };
  const Case table[] = {{{4, 32, 1, false, false}, true, 3},
                        {{4, 32, 1, false, false}, true, 200},
                        {{8, 0, 1, true, false}, false, 5},
                        {{8, 0, 1, true, false}, false, 150},
                        {{0, 0, 1, true, false}, true, 100}};
  for (const Case& c : table) {
    cases.push_back(
        {"quant_moe_experts_" + c.q.name() + (c.fused ? "_gate_up_" : "_gate_and_up_") +
             std::to_string(c.n),
         [c](OpRun& r) {
           const int64_t d = 128, inter = 96, e = 4, k = 2;
           std::vector<MoeExpertWeights> ex(static_cast<size_t>(e));
           for (size_t x = 0; x < ex.size(); ++x) {
             const std::string id = std::to_string(x);
             MoeExpertWeights& w = ex[x];
             if (c.fused) {
               w.gate_up = r.weight(quant_weight(r, c.q, 2 * inter, d, "gate_up" + id));
             } else {
               w.gate = r.weight(quant_weight(r, c.q, inter, d, "gate" + id));
               w.up = r.weight(quant_weight(r, c.q, inter, d, "up" + id));
             }
             w.down = r.weight(quant_weight(r, c.q, d, inter, "down" + id));
           }
           std::vector<int32_t> ids;
           Tensor wt = Tensor::empty({c.n, k}, DType::kF32);
           std::uniform_real_distribution<float> u(0.05f, 1.f);
           for (int64_t t = 0; t < c.n; ++t) {
             const int32_t a = r.ints(1, 0, e - 1)[0];
             const int32_t b = (a + r.ints(1, 1, e - 1)[0]) % e;
             ids.push_back(a);
             ids.push_back(b);
             for (int j = 0; j < k; ++j) wt.data<float>()[t * k + j] = u(r.rng()) / k;
           }
           const Tensor x = r.randn({c.n, d});
           Tensor ids_h = Tensor::empty({c.n, k}, DType::kI32);
           std::copy(ids.begin(), ids.end(), ids_h.data<int32_t>());
           Tensor ids_d = r.be().upload(ids.data(), {c.n, k}, DType::kI32, {});
           Tensor out = r.out_act({c.n, d});
           r.be().moe_experts(r.act(x), ids_d, r.f32(wt), ex, Activation::kSilu, false, out);
           r.output("out", out);
           r.keep("x", x);
           r.keep("ids", ids_h);
           r.keep("wt", wt);
         },
         [c](const OpRun& r) {
           const int64_t d = 128, inter = 96, k = 2;
           const std::vector<double> x = values(r.input("x")), ids = values(r.input("ids")),
                                     wt = values(r.input("wt"));
           std::vector<double> o(static_cast<size_t>(c.n * d), 0.0);
           for (int64_t t = 0; t < c.n; ++t)
             for (int64_t j = 0; j < k; ++j) {
               const std::string id = std::to_string(static_cast<int>(ids[t * k + j]));
               std::vector<double> gate, up;
               if (c.fused) {
                 const std::vector<double> gu = values(r.input("gate_up" + id));
                 gate.assign(gu.begin(), gu.begin() + inter * d);
                 up.assign(gu.begin() + inter * d, gu.end());
               } else {
                 gate = values(r.input("gate" + id));
                 up = values(r.input("up" + id));
               }
               const std::vector<double> down = values(r.input("down" + id));
               std::vector<double> h(static_cast<size_t>(inter));
               for (int64_t i = 0; i < inter; ++i) {
                 double g = 0, v = 0;
                 for (int64_t q = 0; q < d; ++q) {
                   g += x[t * d + q] * gate[i * d + q];
                   v += x[t * d + q] * up[i * d + q];
                 }
                 h[i] = activate(Activation::kSilu, g) * v;
               }
               for (int64_t q = 0; q < d; ++q) {
                 double y = 0;
                 for (int64_t i = 0; i < inter; ++i) y += h[i] * down[q * inter + i];
                 o[t * d + q] += wt[t * k + j] * y;
               }
             }
           return Doubles{o};
         }});
  }
}

}  // namespace

void add_quant_cases(std::vector<OpCase>& cases) {
  linear_cases(cases);
  moe_cases(cases);
}

}  // namespace tachyon::op_harness
