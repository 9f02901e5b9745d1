// Mixture of experts on the GPU: routing in one kernel; the experts as grouped GEMMs
// over tokens sorted by expert. The expert ids come to the host once per layer (the
// one host wait of an MoE layer) to size each expert's group; a stable counting sort
// there keeps the order deterministic. Then: gather the tokens' rows in expert order,
// per expert gate/up GEMM -> gated activation -> down GEMM on its contiguous rows,
// and a weighted combine back into token order.
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace tachyon::cuda {

void CudaBackend::moe_route(const Tensor& logits, int32_t top_k, bool renormalize, Tensor& ids,
                            Tensor& weights) {
  check_here(logits, "moe_route logits");
  check_here(ids, "moe_route ids");
  check_here(weights, "moe_route weights");
  TACHYON_CHECK(logits.ndim() == 2 && (logits.dtype() == dtype_ || logits.dtype() == DType::kF32),
                "moe logits {}", logits.str());
  const int64_t n = logits.dim(0), e = logits.dim(1);
  TACHYON_CHECK(top_k > 0 && top_k <= e, "top_k {} of {} experts", top_k, e);
  TACHYON_CHECK(ids.dtype() == DType::kI32 && weights.dtype() == DType::kF32 &&
                    ids.numel() == n * top_k && weights.numel() == n * top_k,
                "moe_route outputs {} {}", ids.str(), weights.str());
  launch_moe_route(logits.raw(), logits.dtype(), n, static_cast<int>(e), top_k, renormalize,
                   ids.data<int32_t>(), weights.data<float>(), stream_);
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                              const std::vector<MoeExpertWeights>& experts, Activation act,
                              bool accumulate, Tensor& out) {
  wrote(out);
  check_act(x, "moe x");
  check_act(out, "moe out");
  check_here(ids, "moe ids");
  check_here(weights, "moe weights");
  TACHYON_CHECK(x.ndim() == 2 && out.shape() == x.shape(), "moe x {} out {}", x.str(), out.str());
  const int64_t n = x.dim(0), d = x.dim(1);
  if (n == 0) return;
  const int64_t k = ids.numel() / n;
  TACHYON_CHECK(k > 0 && ids.numel() == n * k && weights.numel() == n * k &&
                    ids.dtype() == DType::kI32 && weights.dtype() == DType::kF32,
                "moe ids {} weights {} for {} tokens", ids.str(), weights.str(), n);
  const int64_t num_experts = static_cast<int64_t>(experts.size());
  const int64_t entries = n * k;

  // Expert ids to the host; stable counting sort by expert.
  moe_ids_host_.resize(static_cast<size_t>(entries));
  download(ids, moe_ids_host_.data());
  moe_offsets_.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int32_t id : moe_ids_host_) {
    if (id < 0 || id >= num_experts)
      raise<Internal>("moe_experts: expert id {} of {} experts", id, num_experts);
    ++moe_offsets_[static_cast<size_t>(id) + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) moe_offsets_[e + 1] += moe_offsets_[e];
  // meta = [sorted_token (entries) | row_of (entries)]
  moe_sorted_token_.resize(static_cast<size_t>(2 * entries));
  {
    std::vector<int32_t> next(moe_offsets_.begin(), moe_offsets_.end() - 1);
    for (int64_t i = 0; i < entries; ++i) {
      const int32_t pos = next[static_cast<size_t>(moe_ids_host_[i])]++;
      moe_sorted_token_[pos] = static_cast<int32_t>(i / k);
      moe_sorted_token_[entries + i] = pos;
    }
  }
  moe_meta_ = upload(moe_sorted_token_.data(), {2 * entries}, DType::kI32, moe_meta_);
  const int32_t* sorted_token = moe_meta_.data<int32_t>();
  const int32_t* row_of = sorted_token + entries;

  int64_t inter_max = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (moe_offsets_[e + 1] == moe_offsets_[e]) continue;
    const MoeExpertWeights& ew = experts[static_cast<size_t>(e)];
    TACHYON_CHECK(ew.down && ew.down.ndim() == 2 && ew.down.dim(0) == d, "expert {} down {}", e,
                  ew.down.str());
    inter_max = std::max(inter_max, ew.down.dim(1));
  }
  const size_t es = dtype_size(dtype_);
  auto* xs = static_cast<char*>(scratch(moe_x_, static_cast<size_t>(entries * d) * es));
  auto* hs = static_cast<char*>(scratch(moe_h_, static_cast<size_t>(entries * 2 * inter_max) * es));
  auto* as = static_cast<char*>(scratch(moe_a_, static_cast<size_t>(entries * inter_max) * es));
  auto* ys = static_cast<char*>(scratch(moe_y_, static_cast<size_t>(entries * d) * es));
  launch_gather_rows(x.raw(), dtype_, n, d, sorted_token, entries, xs, err_dev_, stream_);
  const Tensor xs_t = Tensor::wrap(xs, {entries, d}, dtype_, moe_x_.owner(), device());

  auto check_w = [&](const Tensor& w, int64_t rows, int64_t cols, int64_t e, const char* what) {
    TACHYON_CHECK(w && w.ndim() == 2 && w.dim(0) == rows && w.dim(1) == cols &&
                      (w.dtype() == dtype_ || quant_weight(w) != nullptr) && w.device() == device(),
                  "expert {} {} {} (want [{}, {}] {} on the device)", e, what, w.str(), rows, cols,
                  dtype_name(dtype_));
  };
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t off = moe_offsets_[e], cnt = moe_offsets_[e + 1] - off;
    if (cnt == 0) continue;
    const MoeExpertWeights& ew = experts[static_cast<size_t>(e)];
    const int64_t inter = ew.down.dim(1);
    check_w(ew.down, d, inter, e, "down");
    char* h = hs + static_cast<size_t>(off * 2 * inter_max) * es;  // [cnt, 2 inter]
    if (ew.gate_up) {
      check_w(ew.gate_up, 2 * inter, d, e, "gate_up");
      gemm(xs_t, off, cnt, ew.gate_up, h, dtype_, 2 * inter, Tensor(), Activation::kIdentity);
    } else {
      check_w(ew.gate, inter, d, e, "gate");
      check_w(ew.up, inter, d, e, "up");
      gemm(xs_t, off, cnt, ew.gate, h, dtype_, 2 * inter, Tensor(), Activation::kIdentity);
      gemm(xs_t, off, cnt, ew.up, h + static_cast<size_t>(inter) * es, dtype_, 2 * inter, Tensor(),
           Activation::kIdentity);
    }
    char* a = as + static_cast<size_t>(off * inter_max) * es;  // [cnt, inter]
    launch_gated(h, a, dtype_, cnt, inter, static_cast<KAct>(static_cast<int>(act)), stream_);
    const Tensor a_t = Tensor::wrap(a, {cnt, inter}, dtype_, moe_a_.owner(), device());
    gemm(a_t, 0, cnt, ew.down, ys + static_cast<size_t>(off * d) * es, dtype_, d, Tensor(),
         Activation::kIdentity);
  }
  launch_moe_combine(ys, dtype_, n, static_cast<int>(k), d, row_of, weights.data<float>(),
                     accumulate, out.raw(), stream_);
}

}  // namespace tachyon::cuda
