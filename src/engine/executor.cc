#include "engine/executor.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

namespace {

// The plain batch: sequences in the plan's order, each contributing positions
// [start, start + num_tokens); logits rows for the last num_logits positions of each
// sequence, in order. `out` is overwritten (its sampling and deferred tokens emptied too).
void fill_batch(const SchedulerOutput& plan, std::span<const SeqInputs> inputs, ForwardBatch* out) {
  // Cleared, not replaced: the buffers keep their capacity.
  ForwardBatch& b = *out;
  b.token_ids.clear();
  b.positions.clear();
  b.query_start.clear();
  b.context_lens.clear();
  b.block_tables.clear();
  b.prompt_lens.clear();
  b.layouts.clear();
  b.logits_rows.clear();
  b.sampling.rows.clear();
  b.sampling.adjustments.clear();
  b.sampling.adjust_start.clear();
  b.sampling.token_masks.clear();
  b.sampling.mask_of.clear();
  b.deferred.clear();
  b.adapter_ids.clear();
  b.embeddings.clear();
  const size_t n = plan.seqs.size();
  b.token_ids.reserve(static_cast<size_t>(plan.num_batched_tokens));
  b.positions.reserve(static_cast<size_t>(plan.num_batched_tokens));
  b.query_start.reserve(n + 1);
  b.context_lens.reserve(n);
  b.query_start.push_back(0);
  int32_t max_blocks = 0;
  for (const auto& s : plan.seqs)
    max_blocks = std::max(max_blocks, static_cast<int32_t>(s.block_table.size()));
  b.max_blocks_per_seq = max_blocks;
  b.block_tables.assign(n * static_cast<size_t>(max_blocks), -1);
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    const std::span<const int32_t> ids = inputs[i].tokens;
    TACHYON_CHECK_LE(static_cast<size_t>(s.start + s.num_tokens), ids.size());
    for (int32_t p = s.start; p < s.start + s.num_tokens; ++p) {
      b.token_ids.push_back(ids[static_cast<size_t>(p)]);
      b.positions.push_back(p);
    }
    const int32_t end = static_cast<int32_t>(b.token_ids.size());
    b.query_start.push_back(end);
    b.context_lens.push_back(s.start + s.num_tokens);
    b.prompt_lens.push_back(s.prompt_len > 0 ? s.prompt_len : s.start + s.num_tokens);
    b.layouts.push_back(s.layout);
    std::copy(s.block_table.begin(), s.block_table.end(),
              b.block_tables.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(max_blocks)));
    for (int32_t k = s.num_logits; k > 0; --k) b.logits_rows.push_back(end - k);
  }
  // Adapters only where some sequence has one.
  for (size_t i = 0; i < n; ++i)
    if (plan.seqs[i].adapter != 0) {
      b.adapter_ids.reserve(n);
      for (const auto& s : plan.seqs) b.adapter_ids.push_back(s.adapter);
      break;
    }
}

std::vector<std::pair<int32_t, int32_t>> block_pairs(const std::vector<BlockCopy>& copies) {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(copies.size());
  for (const auto& c : copies) pairs.emplace_back(c.src, c.dst);
  return pairs;
}

}  // namespace

ModelExecutor::ModelExecutor(std::shared_ptr<LanguageModel> model, std::vector<int32_t> eos_ids,
                             bool device_sampling)
    : model_(std::move(model)), eos_ids_(std::move(eos_ids)) {
  TACHYON_CHECK(model_ != nullptr);
  device_sampling_ = device_sampling && model_->samples_on_device();
  vocab_size_ = model_->vocab_size();
}

const ForwardBatch& ModelExecutor::build(const SchedulerOutput& plan, const SeqLookup& seqs,
                                         int64_t prev_step) {
  ForwardBatch& batch = batch_;
  inputs_.clear();
  inputs_.reserve(plan.seqs.size());
  for (const ScheduledSeq& s : plan.seqs) inputs_.push_back(seqs(s));
  fill_batch(plan, inputs_, &batch);
  add_sampling(plan);
  add_images(plan);
  // Inputs that the step in flight chooses: taken from its ids on the device.
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& ss = plan.seqs[i];
    for (const PendingToken& p : inputs_[i].pending) {
      const int64_t pos = static_cast<int64_t>(p.index);
      if (pos < ss.start || pos >= ss.start + ss.num_tokens) continue;
      TACHYON_CHECK(prev_step >= 0 && p.step == prev_step,
                    "sequence {}: token {} of step {} is not the previous step's", ss.seq_id,
                    p.index, p.step);
      const int32_t index = batch.query_start[i] + static_cast<int32_t>(pos - ss.start);
      batch.token_ids[static_cast<size_t>(index)] = 0;
      batch.deferred.push_back(DeferredToken{index, p.row});
    }
  }
  return batch;
}

void ModelExecutor::add_sampling(const SchedulerOutput& plan) {
  if (!device_sampling_) return;
  ForwardBatch& batch = batch_;
  SamplingBatch& sb = batch.sampling;
  sb.rows.reserve(batch.logits_rows.size());
  sb.adjust_start.push_back(0);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    const SeqInputs& in = inputs_[i];
    for (int32_t k = 0; k < s.num_logits; ++k) {
      RowSampling row;  // kHost unless the device can do all the row needs
      if (k + 1 == s.num_logits && in.device_config != nullptr) {
        SamplingContext ctx;
        ctx.config = in.device_config;
        ctx.tokens = in.tokens;
        ctx.prompt_len = in.prompt_len;
        ctx.eos_ids = eos_ids_;
        row = row_sampling(*in.device_config, in.rng);
        if (!processors_inactive(ctx)) token_adjustments(ctx, vocab_size_, &sb.adjustments);
        if (!in.allowed.empty()) {
          sb.mask_of.resize(sb.rows.size(), -1);
          sb.mask_of.push_back(static_cast<int32_t>(sb.token_masks.size() / in.allowed.size()));
          sb.token_masks.insert(sb.token_masks.end(), in.allowed.begin(), in.allowed.end());
        }
      }
      sb.rows.push_back(row);
      sb.adjust_start.push_back(static_cast<int32_t>(sb.adjustments.size()));
    }
  }
  if (!sb.mask_of.empty()) sb.mask_of.resize(sb.rows.size(), -1);
  if (!sb.any_on_device()) {  // empty: every row's logits come back (kept buffers)
    sb.rows.clear();
    sb.adjustments.clear();
    sb.adjust_start.clear();
    sb.token_masks.clear();
    sb.mask_of.clear();
  }
}

void ModelExecutor::add_images(const SchedulerOutput& plan) {
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const PromptImages* im = inputs_[i].images;
    if (im == nullptr) continue;
    const ScheduledSeq& s = plan.seqs[i];
    const int32_t end = s.start + s.num_tokens, per = im->tokens_per_image;
    const std::vector<int32_t>& pos = im->positions;
    // Runs of image tokens at consecutive positions within one image, each one slice of
    // that image's embeddings (a chunk of the prompt may cut an image anywhere).
    size_t k = static_cast<size_t>(std::lower_bound(pos.begin(), pos.end(), s.start) - pos.begin());
    while (k < pos.size() && pos[k] < end) {
      const size_t image = k / static_cast<size_t>(per);
      const int64_t first = static_cast<int64_t>(k % static_cast<size_t>(per));
      size_t n = 1;
      while (k + n < pos.size() && pos[k + n] < end &&
             pos[k + n] == pos[k] + static_cast<int32_t>(n) &&
             (k + n) / static_cast<size_t>(per) == image)
        ++n;
      const Tensor values = model_->image_embeddings(*im->images[image]);
      batch_.embeddings.push_back(
          InjectedEmbeddings{batch_.query_start[i] + (pos[k] - s.start),
                             values.slice_rows(first, first + static_cast<int64_t>(n))});
      k += n;
    }
  }
}

std::shared_ptr<const PromptImages> prompt_images(
    const LanguageModel& model, std::span<const int32_t> prompt,
    const std::vector<std::shared_ptr<const ImageInput>>& images) {
  const int32_t token = model.image_token_id(), per = model.image_tokens();
  if (per <= 0) {
    if (!images.empty())
      raise<InvalidArgument>("images: this model has no vision tower: it takes no images");
    return nullptr;
  }
  auto out = std::make_shared<PromptImages>();
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] == token) out->positions.push_back(static_cast<int32_t>(i));
  if (out->positions.size() != images.size() * static_cast<size_t>(per))
    raise<InvalidArgument>(
        "prompt_ids: {} image tokens (id {}) for {} image(s) of {} tokens each (expected {})",
        out->positions.size(), token, images.size(), per, images.size() * static_cast<size_t>(per));
  if (images.empty()) return nullptr;
  for (size_t i = 0; i < images.size(); ++i) {
    if (images[i] == nullptr) raise<InvalidArgument>("images: image {} is missing", i);
    try {
      model.check_image(*images[i]);
    } catch (const InvalidArgument& e) {
      raise<InvalidArgument>("images: image {}: {}", i, e.what());
    }
  }
  out->images = images;
  out->tokens_per_image = per;
  return out;
}

void ModelExecutor::read_rows(std::span<const ScheduledSeq> seqs, const ForwardOutput& out,
                              LogitRows* rows) const {
  // The model's result for each sequence: a token chosen on the device, or a row of
  // logits for the host (the rows in order, only those sampled on the host).
  size_t expected_rows = 0;
  for (const ScheduledSeq& s : seqs) expected_rows += static_cast<size_t>(s.num_logits);
  const Tensor& logits = out.logits;
  TACHYON_CHECK(out.tokens.size() == expected_rows, "the model returned {} tokens for {} rows",
                out.tokens.size(), expected_rows);
  const int64_t host_rows = std::count(out.tokens.begin(), out.tokens.end(), kTokenOnHost);
  TACHYON_CHECK(host_rows == 0 || (logits.ndim() == 2 && logits.dim(0) == host_rows &&
                                   logits.dim(1) == vocab_size_ && logits.dtype() == DType::kF32),
                "the model returned logits {} for {} rows of vocabulary {}", logits.str(),
                host_rows, vocab_size_);
  size_t row = 0;
  int64_t host_row = 0;
  for (const ScheduledSeq& s : seqs) {
    if (s.num_logits > 1) {
      StepRow r;
      for (int32_t k = 0; k < s.num_logits; ++k, ++row)
        TACHYON_CHECK(out.tokens[row] == kTokenOnHost,
                      "sequence {}: a verify row was sampled on the device", s.seq_id);
      r.logits = logits.data<float>() + host_row * vocab_size_;
      r.num_rows = s.num_logits;
      host_row += s.num_logits;
      (*rows)[s.seq_id] = r;
      continue;
    }
    for (int32_t k = 0; k < s.num_logits; ++k, ++row) {
      StepRow r;
      r.token = out.tokens[row];
      if (r.token >= 0 && !out.logprobs.empty()) r.logprob = out.logprobs[row];
      if (r.token == kTokenOnHost) r.logits = logits.data<float>() + (host_row++) * vocab_size_;
      (*rows)[s.seq_id] = r;  // the last row of the sequence
    }
  }
}

void ModelExecutor::move_blocks(const SchedulerOutput& plan) {
  if (plan.kv_blocks > 0) model_->grow_kv_cache(plan.kv_blocks);
  if (!plan.swap_out.empty() || !plan.swap_in.empty())
    model_->swap_kv_blocks(block_pairs(plan.swap_out), block_pairs(plan.swap_in));
  if (!plan.copies.empty()) model_->copy_kv_blocks(block_pairs(plan.copies));
}

}  // namespace tachyon
