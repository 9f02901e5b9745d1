// ModelRunner::launch / collect / forward_sample: the step's logits stay on the device,
// which chooses the tokens of the rows it can; only their ids (and the logits of the
// rows the host needs) come back, copied behind the step's work so that the host can
// queue the next step before they arrive.
#include <algorithm>

#include "core/error.h"
#include "model/model_runner.h"

namespace tachyon {

namespace {

void validate_sampling(const SamplingBatch& sb, int64_t R, int64_t V) {
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
  if (!sb.mask_of.empty() || !sb.token_masks.empty()) {
    const int64_t words = token_mask_words(V);
    if (static_cast<int64_t>(sb.mask_of.size()) != R ||
        static_cast<int64_t>(sb.token_masks.size()) % words != 0)
      raise<InvalidArgument>(
          "forward: token masks need {} mask indices and {} words a mask, not {} and {} words", R,
          words, sb.mask_of.size(), sb.token_masks.size());
    const int64_t masks = static_cast<int64_t>(sb.token_masks.size()) / words;
    for (int32_t m : sb.mask_of)
      if (m < -1 || m >= masks)
        raise<InvalidArgument>("forward: token mask {} out of [-1, {})", m, masks);
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
}

}  // namespace

Tensor ModelRunner::host_buffer(int64_t elems, DType dtype) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(elems, 1)) * dtype_size(dtype);
  for (Tensor& t : host_pool_)
    if (t.owner().use_count() == 1 && t.nbytes() >= bytes)
      return Tensor::wrap(t.raw(), {elems}, dtype, t.owner(), t.device());
  // Drop free buffers too small to be reused; keep the pool to a few buffers.
  std::erase_if(host_pool_, [](const Tensor& t) { return t.owner().use_count() == 1; });
  host_pool_.push_back(be_->alloc_host({static_cast<int64_t>(bytes + bytes / 4)}, DType::kU8));
  Tensor& t = host_pool_.back();
  return Tensor::wrap(t.raw(), {elems}, dtype, t.owner(), t.device());
}

void ModelRunner::launch(const ForwardBatch& b) {
  TACHYON_CHECK(launched_.size() < 2, "launch: two steps are already launched and not collected");
  const int64_t R = static_cast<int64_t>(b.logits_rows.size());
  const int64_t V = cfg_.vocab_size;
  Launched l;
  l.rows = R;
  if (!b.sampling.empty()) validate_sampling(b.sampling, R, V);
  if (b.sampling.empty() || !be_->supports_sampling() || !b.sampling.any_on_device()) {
    // Every row's logits to the host, at once.
    l.ready = true;
    l.out.logits = forward(b);
    l.out.hidden = host_hidden(b);
    l.out.tokens.assign(static_cast<size_t>(R), kTokenOnHost);
    last_ids_ = Tensor();
    launched_.push_back(std::move(l));
    return;
  }
  const SamplingBatch& sb = b.sampling;
  Tensor logits = device_logits(b);
  // The ids [R] i32 and beside them their log-probabilities [R] f32: one copy back.
  Tensor both = sample_ids_.view(*be_, 1, 2 * R, DType::kI32);
  Tensor ids = Tensor::wrap(both.raw(), {R}, DType::kI32, both.owner(), both.device());
  Tensor logprobs =
      Tensor::wrap(both.data<int32_t>() + R, {R}, DType::kF32, both.owner(), both.device());
  be_->sample(logits, sb, ids, logprobs);
  l.ids = host_buffer(2 * R, DType::kI32);
  const Tensor both_flat =
      Tensor::wrap(both.raw(), {2 * R}, DType::kI32, both.owner(), both.device());
  be_->download_async(both_flat, l.ids.raw());
  // The rows sampled on the host, in order.
  int64_t host_rows = 0;
  for (const RowSampling& r : sb.rows) host_rows += r.mode == RowSampling::Mode::kHost ? 1 : 0;
  if (host_rows > 0) {
    Tensor buf = host_buffer(host_rows * V, DType::kF32);
    l.logits = Tensor::wrap(buf.raw(), {host_rows, V}, DType::kF32, buf.owner(), buf.device());
    int64_t h = 0;
    for (int64_t r = 0; r < R; ++r) {
      if (sb.rows[static_cast<size_t>(r)].mode != RowSampling::Mode::kHost) continue;
      const Tensor row = Tensor::wrap(logits.data<float>() + r * V, {1, V}, DType::kF32,
                                      logits.owner(), logits.device());
      be_->download_async(row, l.logits.data<float>() + (h++) * V);
    }
  }
  if (!b.hidden_rows.empty()) {
    const Tensor& hidden = decoder_.hidden();
    Tensor buf = host_buffer(hidden.numel(), hidden.dtype());
    l.hidden = Tensor::wrap(buf.raw(), hidden.shape(), hidden.dtype(), buf.owner(), buf.device());
    be_->download_async(hidden, l.hidden.raw());
  }
  l.fence = be_->fence();
  last_ids_ = ids;
  launched_.push_back(std::move(l));
}

ForwardOutput ModelRunner::collect() {
  TACHYON_CHECK(!launched_.empty(), "collect: no step was launched");
  Launched l = std::move(launched_.front());
  launched_.pop_front();
  if (l.ready) return std::move(l.out);
  be_->wait_fence(l.fence);
  ForwardOutput out;
  const int32_t* ids = l.ids.data<int32_t>();
  out.tokens.assign(ids, ids + l.rows);
  const float* logprobs = reinterpret_cast<const float*>(ids + l.rows);
  out.logprobs.assign(logprobs, logprobs + l.rows);
  // The host rows' logits stay in their buffer, held by the output until the caller
  // drops it.
  out.logits = l.logits ? l.logits : Tensor::empty({0, cfg_.vocab_size}, DType::kF32);
  if (l.hidden) out.hidden = l.hidden.to(DType::kF32);
  return out;
}

Tensor ModelRunner::host_hidden(const ForwardBatch& b) {
  // (A step without hidden rows may not have run the decoder on the host: a graph.)
  if (b.hidden_rows.empty()) return Tensor();
  const Tensor& hidden = decoder_.hidden();
  Tensor h = Tensor::empty(hidden.shape(), hidden.dtype());
  be_->download(hidden, h.raw());
  return h.dtype() == DType::kF32 ? h : h.to(DType::kF32);
}

ForwardOutput ModelRunner::forward_sample(const ForwardBatch& b) {
  TACHYON_CHECK(launched_.empty(), "forward_sample: a launched step was not collected");
  launch(b);
  return collect();
}

}  // namespace tachyon
