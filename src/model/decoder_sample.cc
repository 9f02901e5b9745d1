// Decoder::forward_sample: the step's logits stay on the device, which chooses the
// tokens of the rows it can; only their ids (and the logits of the rows the host needs)
// come back.
#include <algorithm>

#include "core/error.h"
#include "model/decoder.h"

namespace tachyon {

ForwardOutput Decoder::forward_sample(const ForwardBatch& b) {
  const int64_t R = static_cast<int64_t>(b.logits_rows.size());
  const int64_t V = cfg_.vocab_size;
  ForwardOutput out;
  if (b.sampling.empty() || !be_->supports_sampling() || !b.sampling.any_on_device()) {
    out.logits = forward(b);
    out.tokens.assign(static_cast<size_t>(R), kTokenOnHost);
    return out;
  }
  const SamplingBatch& sb = b.sampling;
  if (static_cast<int64_t>(sb.rows.size()) != R)
    raise<InvalidArgument>("forward: {} sampling rows for {} logits rows", sb.rows.size(), R);
  if (!sb.adjust_start.empty()) {
    if (static_cast<int64_t>(sb.adjust_start.size()) != R + 1 || sb.adjust_start.front() != 0 ||
        sb.adjust_start.back() != static_cast<int32_t>(sb.adjustments.size()) ||
        !std::is_sorted(sb.adjust_start.begin(), sb.adjust_start.end()))
      raise<InvalidArgument>("forward: adjust_start must run from 0 to {} over {} rows",
                             sb.adjustments.size(), R);
  } else if (!sb.adjustments.empty()) {
    raise<InvalidArgument>("forward: adjustments without adjust_start");
  }
  for (const TokenAdjustment& a : sb.adjustments)
    if (a.token < 0 || a.token >= V)
      raise<InvalidArgument>("forward: adjusted token {} out of [0, {})", a.token, V);
  for (const RowSampling& r : sb.rows) {
    if (r.mode != RowSampling::Mode::kDevice || r.greedy) continue;
    if (!(r.temperature > 0.0f) || !(r.top_p > 0.0f && r.top_p <= 1.0f) ||
        !(r.min_p >= 0.0f && r.min_p <= 1.0f) || r.top_k < 0)
      raise<InvalidArgument>(
          "forward: sampling parameters out of range (temperature {}, top_k {}, top_p {}, "
          "min_p {})",
          r.temperature, r.top_k, r.top_p, r.min_p);
  }

  Tensor logits = device_logits(b);
  sample_ids_.view(*be_, 1, R, DType::kI32);
  Tensor ids = Tensor::wrap(sample_ids_.storage.raw(), {R}, DType::kI32,
                            sample_ids_.storage.owner(), sample_ids_.storage.device());
  be_->sample(logits, sb, ids);
  h_sample_ids_.resize(static_cast<size_t>(R));
  be_->download(ids, h_sample_ids_.data());
  out.tokens.assign(h_sample_ids_.begin(), h_sample_ids_.end());

  // The rows sampled on the host, in order.
  const int64_t host_rows = std::count(out.tokens.begin(), out.tokens.end(), kTokenOnHost);
  out.logits = Tensor::empty({host_rows, V}, DType::kF32);
  int64_t h = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (out.tokens[static_cast<size_t>(r)] != kTokenOnHost) continue;
    const Tensor row = Tensor::wrap(logits.data<float>() + r * V, {1, V}, DType::kF32,
                                    logits.owner(), logits.device());
    be_->download(row, out.logits.data<float>() + (h++) * V);
  }
  return out;
}

}  // namespace tachyon
