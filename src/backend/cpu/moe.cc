// Mixture-of-experts routing and expert MLPs on the CPU: tokens are grouped per
// expert, each expert runs two GEMMs over its group, results are scattered back.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/vec.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tachyon::cpu {

void CpuBackend::moe_route(const Tensor& logits, int32_t top_k, bool renormalize, Tensor& ids,
                           Tensor& weights) {
  TACHYON_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "moe logits {}", logits.str());
  const int64_t n = logits.dim(0), e = logits.dim(1);
  TACHYON_CHECK(top_k > 0 && top_k <= e, "top_k {} of {} experts", top_k, e);
  TACHYON_CHECK(ids.numel() == n * top_k && weights.numel() == n * top_k, "moe_route outputs");
  const float* l = logits.data<float>();
  int32_t* id = ids.data<int32_t>();
  float* w = weights.data<float>();
  for (int64_t t = 0; t < n; ++t) {
    const float* row = l + t * e;
    const float mx = *std::max_element(row, row + e);
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += std::exp(double{row[j]} - mx);
    // Selection by logit (softmax is monotonic); ties go to the lower expert id.
    int32_t* sel = id + t * top_k;
    for (int k = 0; k < top_k; ++k) {
      int32_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        bool taken = false;
        for (int q = 0; q < k; ++q) taken |= sel[q] == j;
        if (!taken && (best < 0 || row[j] > row[best])) best = static_cast<int32_t>(j);
      }
      sel[k] = best;
    }
    double picked = 0;
    for (int k = 0; k < top_k; ++k) {
      const double p = std::exp(double{row[sel[k]]} - mx) / sum;
      w[t * top_k + k] = static_cast<float>(p);
      picked += p;
    }
    if (renormalize)
      for (int k = 0; k < top_k; ++k)
        w[t * top_k + k] = static_cast<float>(w[t * top_k + k] / picked);
  }
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                             const std::vector<MoeExpertWeights>& experts, Activation act,
                             bool accumulate, Tensor& out) {
  TACHYON_CHECK(x.ndim() == 2 && out.shape() == x.shape(), "moe x {} out {}", x.str(), out.str());
  const int64_t n = x.dim(0), d = x.dim(1);
  const int64_t k = n > 0 ? ids.numel() / n : 0;
  TACHYON_CHECK(ids.numel() == n * k && weights.numel() == n * k, "moe ids/weights");
  const int32_t* id = ids.data<int32_t>();
  const float* wt = weights.data<float>();
  float* o = out.data<float>();
  if (!accumulate) std::memset(o, 0, out.nbytes());
  const int64_t num_experts = static_cast<int64_t>(experts.size());
  for (int64_t i = 0; i < n * k; ++i)
    TACHYON_CHECK(id[i] >= 0 && id[i] < num_experts, "expert id {} of {}", id[i], num_experts);

  for (int64_t e = 0; e < num_experts; ++e) {
    moe_rows_.clear();
    moe_w_.clear();
    for (int64_t i = 0; i < n * k; ++i) {
      if (id[i] != e) continue;
      moe_rows_.push_back(static_cast<int32_t>(i / k));
      moe_w_.push_back(wt[i]);
    }
    const int64_t m = static_cast<int64_t>(moe_rows_.size());
    if (m == 0) continue;
    const MoeExpertWeights& ew = experts[static_cast<size_t>(e)];
    const Tensor& down = ew.down;
    const int64_t inter = down.dim(1);
    TACHYON_CHECK(down.dim(0) == d, "expert {} down {}", e, down.str());
    moe_x_.resize(static_cast<size_t>(m * d));
    moe_h_.resize(static_cast<size_t>(m * 2 * inter));
    moe_y_.resize(static_cast<size_t>(m * d));
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(moe_x_.data() + r * d, x.data<float>() + int64_t{moe_rows_[r]} * d,
                  static_cast<size_t>(d) * 4);
    if (ew.gate_up) {
      TACHYON_CHECK(ew.gate_up.dim(0) == 2 * inter && ew.gate_up.dim(1) == d,
                    "expert {} gate_up {}", e, ew.gate_up.str());
      product(moe_x_.data(), m, d, d, ew.gate_up, nullptr, moe_h_.data(), 2 * inter);
    } else {
      TACHYON_CHECK(ew.gate.dim(0) == inter && ew.up.dim(0) == inter && ew.gate.dim(1) == d &&
                        ew.up.dim(1) == d,
                    "expert {} gate {} up {}", e, ew.gate.str(), ew.up.str());
      product(moe_x_.data(), m, d, d, ew.gate, nullptr, moe_h_.data(), 2 * inter);
      product(moe_x_.data(), m, d, d, ew.up, nullptr, moe_h_.data() + inter, 2 * inter);
    }
    // act(gate) * up, written over the gate half in place.
    for (int64_t r = 0; r < m; ++r) {
      float* row = moe_h_.data() + r * 2 * inter;
      gated(row, row + inter, row, inter, act);
    }
    product(moe_h_.data(), m, inter, 2 * inter, down, nullptr, moe_y_.data(), d);
    for (int64_t r = 0; r < m; ++r)
      axpy(moe_w_[r], moe_y_.data() + r * d, o + int64_t{moe_rows_[r]} * d, d);
  }
}

}  // namespace tachyon::cpu
