// Op cases: mixture of experts (routing, experts) and the sampling helpers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "backend/op_harness.h"

namespace tachyon::op_harness {
namespace {

using Doubles = std::vector<std::vector<double>>;

// Each row's index of its largest value, the lowest on ties; -1 for a row with NaN.
std::vector<double> argmax_rows(const std::vector<double>& v, int64_t cols) {
  std::vector<double> ids;
  for (size_t r = 0; r * cols < v.size(); ++r) {
    const double* row = v.data() + r * cols;
    if (std::any_of(row, row + cols, [](double x) { return std::isnan(x); })) {
      ids.push_back(-1);
      continue;
    }
    ids.push_back(static_cast<double>(std::max_element(row, row + cols) - row));
  }
  return ids;
}

void moe_cases(std::vector<OpCase>& cases) {
  for (auto [n, e, k] : {std::tuple<int64_t, int, int>{1, 8, 2},
                         {300, 60, 4},
                         {57, 4, 1},
                         {9, 128, 8},
                         {2049, 64, 6}}) {
    for (bool renorm : {false, true}) {
      cases.push_back({"moe_route_" + std::to_string(n) + "x" + std::to_string(e) + "_top" +
                           std::to_string(k) + (renorm ? "_renorm" : ""),
                       [n, e, k, renorm](OpRun& r) {
                         Tensor logits = r.randn({n, e}, 2.f);
                         // An exact tie: the lower expert id first.
                         logits.data<float>()[0] = logits.data<float>()[1] = 9.f;
                         Tensor ids = r.out({n, k}, DType::kI32), w = r.out({n, k}, DType::kF32);
                         r.be().moe_route(r.act(logits), k, renorm, ids, w);
                         r.output("ids", ids, true);
                         r.output("weights", w);
                         r.keep("logits", logits);
                       },
                       [n, e, k, renorm](const OpRun& r) {
                         const std::vector<double> l = values(r.input("logits"));
                         Doubles o(2);
                         for (int64_t t = 0; t < n; ++t) {
                           const double* row = l.data() + t * e;
                           const double mx = *std::max_element(row, row + e);
                           double sum = 0;
                           for (int j = 0; j < e; ++j) sum += std::exp(row[j] - mx);
                           std::vector<int> order(static_cast<size_t>(e));
                           std::iota(order.begin(), order.end(), 0);
                           std::stable_sort(order.begin(), order.end(),
                                            [&](int a, int b) { return row[a] > row[b]; });
                           double top = 0;
                           for (int j = 0; j < k; ++j) top += std::exp(row[order[j]] - mx) / sum;
                           for (int j = 0; j < k; ++j) {
                             o[0].push_back(order[j]);
                             o[1].push_back(std::exp(row[order[j]] - mx) / sum /
                                            (renorm ? top : 1.0));
                           }
                         }
                         return o;
                       },
                       false, true});
    }
  }
  for (bool fused : {true, false}) {
    for (auto [n, e, k] :
         {std::tuple<int64_t, int, int>{1, 8, 2}, {200, 8, 2}, {33, 16, 4}, {2049, 8, 2}}) {
      for (bool acc : {false, true}) {
        cases.push_back({"moe_experts_" + std::string(fused ? "gate_up_" : "gate_and_up_") +
                             std::to_string(n) + "x" + std::to_string(e) + "_top" +
                             std::to_string(k) + (acc ? "_accumulate" : ""),
                         [fused, n, e, k, acc](OpRun& r) {
                           const int64_t d = 128, inter = 96;
                           const float s_in = 1.f / std::sqrt(static_cast<float>(d)),
                                       s_mid = 1.f / std::sqrt(static_cast<float>(inter));
                           std::vector<MoeExpertWeights> ex(static_cast<size_t>(e));
                           for (MoeExpertWeights& w : ex) {
                             if (fused) {
                               w.gate_up = r.weight(r.randn({2 * inter, d}, s_in));
                             } else {
                               w.gate = r.weight(r.randn({inter, d}, s_in));
                               w.up = r.weight(r.randn({inter, d}, s_in));
                             }
                             w.down = r.weight(r.randn({d, inter}, s_mid));
                           }
                           // k distinct experts a row, weights summing to about 1.
                           std::vector<int32_t> ids;
                           Tensor wt = Tensor::empty({n, k}, DType::kF32);
                           std::vector<int32_t> all(static_cast<size_t>(e));
                           std::iota(all.begin(), all.end(), 0);
                           std::uniform_real_distribution<float> u(0.05f, 1.f);
                           for (int64_t t = 0; t < n; ++t) {
                             std::shuffle(all.begin(), all.end(), r.rng());
                             ids.insert(ids.end(), all.begin(), all.begin() + k);
                             for (int j = 0; j < k; ++j)
                               wt.data<float>()[t * k + j] = u(r.rng()) / k;
                           }
                           Tensor ids_d = r.be().upload(ids.data(), {n, k}, DType::kI32, {});
                           Tensor out = acc ? r.act(r.randn({n, d})) : r.out_act({n, d});
                           r.be().moe_experts(r.act(r.randn({n, d})), ids_d, r.f32(wt), ex,
                                              Activation::kSilu, acc, out);
                           r.output("out", out);
                         },
                         {}});
      }
    }
  }
}

void sampling_cases(std::vector<OpCase>& cases) {
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{5, 50257}, {1, 7}, {64, 32000}}) {
    const std::string sh = std::to_string(rows) + "x" + std::to_string(vocab);
    // Ties (lowest index wins), a clear winner, and a NaN row.
    auto logits = [rows, vocab](OpRun& r) {
      Tensor l = r.randn({rows, vocab}, 3.f);
      float* p = l.data<float>();
      p[(rows - 1) * vocab + vocab / 2] = 40.f;
      if (rows > 3) {
        p[2 * vocab + 5] = p[2 * vocab + vocab - 1] = 50.f;
        p[3 * vocab + 1] = std::numeric_limits<float>::quiet_NaN();
      }
      return l;
    };
    cases.push_back({"argmax_" + sh,
                     [logits, rows](OpRun& r) {
                       Tensor l = logits(r);
                       Tensor ids = r.out({rows}, DType::kI32);
                       r.be().argmax(r.f32(l), ids);
                       r.output("ids", ids, true);
                       r.keep("logits", l);
                     },
                     [vocab](const OpRun& r) {
                       return Doubles{argmax_rows(values(r.input("logits")), vocab)};
                     }});
    cases.push_back({"log_softmax_" + sh,
                     [rows, vocab](OpRun& r) {
                       Tensor l = r.randn({rows, vocab}, 3.f);
                       l.data<float>()[vocab - 1] = 30.f;
                       Tensor d = r.f32(l);
                       r.be().log_softmax(d);
                       r.output("logits", d);
                       r.keep("logits", l);
                     },
                     [vocab](const OpRun& r) {
                       std::vector<double> v = values(r.input("logits"));
                       for (size_t i = 0; i < v.size(); i += vocab) {
                         const double mx = *std::max_element(v.begin() + i, v.begin() + i + vocab);
                         double s = 0;
                         for (size_t j = i; j < i + vocab; ++j) s += std::exp(v[j] - mx);
                         for (size_t j = i; j < i + vocab; ++j) v[j] -= mx + std::log(s);
                       }
                       return Doubles{v};
                     },
                     false, true});
    // Greedy rows on the device; the last row stays on the host; row 0's best token is
    // banned.
    cases.push_back({"sample_greedy_" + sh,
                     [rows, vocab](OpRun& r) {
                       Tensor l = r.randn({rows, vocab}, 3.f);
                       SamplingBatch b;
                       b.rows.resize(static_cast<size_t>(rows));
                       for (RowSampling& s : b.rows) {
                         s.mode = RowSampling::Mode::kDevice;
                         s.greedy = true;
                       }
                       if (rows > 1) b.rows.back().mode = RowSampling::Mode::kHost;
                       const float* p = l.data<float>();
                       const int32_t best =
                           static_cast<int32_t>(std::max_element(p, p + vocab) - p);
                       TokenAdjustment ban;
                       ban.token = best;
                       ban.flags = TokenAdjustment::kBanned;
                       b.adjustments = {ban};
                       b.adjust_start.assign(static_cast<size_t>(rows) + 1, 1);
                       b.adjust_start[0] = 0;
                       Tensor d = r.f32(l), ids = r.out({rows}, DType::kI32);
                       Tensor logprobs = r.be().alloc({rows}, DType::kF32);
                       if (r.be().supports_sampling()) r.be().sample(d, b, ids, logprobs);
                       r.output("ids", ids, true);
                       r.keep("logits", l);
                     },
                     [rows, vocab](const OpRun& r) {
                       std::vector<double> v = values(r.input("logits"));
                       v[static_cast<size_t>(argmax_rows(v, vocab)[0])] =
                           -std::numeric_limits<double>::infinity();
                       std::vector<double> ids = argmax_rows(v, vocab);
                       if (rows > 1) ids.back() = kTokenOnHost;
                       return Doubles{ids};
                     },
                     true});
  }
}

}  // namespace

void add_misc_cases(std::vector<OpCase>& cases) {
  moe_cases(cases);
  sampling_cases(cases);
}

}  // namespace tachyon::op_harness
