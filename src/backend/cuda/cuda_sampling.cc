// CudaBackend::sample: packs the step's sampling parameters, uploads them with the
// step's other metadata (no wait) and runs the sampling kernel over the logits. Steps
// whose rows are all greedy and unadjusted upload nothing and take the split greedy
// scan (several blocks a row: a row of one block is latency-bound) where the rows and the
// vocabulary fit it.
#include <cstddef>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/sampling_kernels.h"
#include "core/error.h"

namespace tachyon::cuda {
namespace {

static_assert(sizeof(KAdjust) == sizeof(TokenAdjustment));
static_assert(offsetof(TokenAdjustment, token) == offsetof(KAdjust, token));
static_assert(offsetof(TokenAdjustment, count) == offsetof(KAdjust, count));
static_assert(offsetof(TokenAdjustment, bias) == offsetof(KAdjust, bias));
static_assert(offsetof(TokenAdjustment, flags) == offsetof(KAdjust, flags));
static_assert(TokenAdjustment::kInContext == 1 && TokenAdjustment::kBanned == 2);
static_assert(kSampledOnHost == kTokenOnHost && kSampledBadLogits == kTokenBadLogits &&
              kSampledNoneAllowed == kTokenNoneAllowed);
static_assert(sizeof(KSampleRow) % 4 == 0);

KSampleRow pack(const RowSampling& r) {
  KSampleRow k;
  k.on_device = r.mode == RowSampling::Mode::kDevice ? 1 : 0;
  k.greedy = r.greedy ? 1 : 0;
  k.temperature = r.temperature;
  k.top_k = r.top_k;
  k.top_p = r.top_p;
  k.min_p = r.min_p;
  k.repetition_penalty = r.repetition_penalty;
  k.presence_penalty = r.presence_penalty;
  k.frequency_penalty = r.frequency_penalty;
  k.seed_lo = static_cast<uint32_t>(r.seed);
  k.seed_hi = static_cast<uint32_t>(r.seed >> 32);
  k.seq_index = r.seq_index;
  k.step_lo = static_cast<uint32_t>(r.step);
  k.step_hi = static_cast<uint32_t>(r.step >> 32);
  return k;
}

}  // namespace

void CudaBackend::sample(Tensor& logits, const SamplingBatch& batch, Tensor& ids,
                         Tensor& logprobs) {
  check_here(logits, "sample logits");
  check_here(ids, "sample ids");
  check_here(logprobs, "sample logprobs");
  TACHYON_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "sample logits {}",
                logits.str());
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  TACHYON_CHECK(static_cast<int64_t>(batch.rows.size()) == rows, "sample: {} rows for logits {}",
                batch.rows.size(), logits.str());
  TACHYON_CHECK(ids.dtype() == DType::kI32 && ids.numel() == rows, "sample ids {}", ids.str());
  TACHYON_CHECK(logprobs.dtype() == DType::kF32 && logprobs.numel() == rows, "sample logprobs {}",
                logprobs.str());
  const bool has_adj = !batch.adjust_start.empty();
  TACHYON_CHECK(
      !has_adj || (static_cast<int64_t>(batch.adjust_start.size()) == rows + 1 &&
                   batch.adjust_start.back() == static_cast<int32_t>(batch.adjustments.size())),
      "sample: adjust_start has {} entries for {} rows", batch.adjust_start.size(), rows);
  const bool has_masks = !batch.mask_of.empty();
  TACHYON_CHECK(!has_masks || (static_cast<int64_t>(batch.mask_of.size()) == rows &&
                               batch.token_masks.size() % token_mask_words(vocab) == 0),
                "sample: {} mask indices and {} mask words for {} rows of vocabulary {}",
                batch.mask_of.size(), batch.token_masks.size(), rows, vocab);
  if (rows == 0) return;
  // Greedy on the device everywhere, nothing to adjust or mask: the kernels need no
  // parameters (one copy fewer between the step's logits and its ids).
  bool all_greedy = (!has_adj || batch.adjustments.empty()) && !has_masks;
  for (const RowSampling& r : batch.rows)
    all_greedy = all_greedy && r.mode == RowSampling::Mode::kDevice && r.greedy;
  // The split scan for those.
  if (all_greedy && rows <= kGreedyMaxRows && rows <= kMergeCounters && vocab <= kGreedyMaxVocab) {
    void* partial = scratch(sample_partial_, greedy_partial_bytes(rows, vocab));
    launch_sample_greedy(logits.data<float>(), rows, vocab, partial,
                         merge_counters_.data<int32_t>(), ids.data<int32_t>(),
                         logprobs.data<float>(), stream_);
    return;
  }
  const KSampleRow* rows_meta = nullptr;
  if (!all_greedy) {
    std::vector<KSampleRow> meta(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) meta[static_cast<size_t>(r)] = pack(batch.rows[r]);
    const int64_t meta_words = rows * static_cast<int64_t>(sizeof(KSampleRow) / 4);
    sample_meta_ = upload(meta.data(), {meta_words}, DType::kI32, sample_meta_);
    rows_meta = reinterpret_cast<const KSampleRow*>(sample_meta_.raw());
  }
  const int32_t* start = nullptr;
  const KAdjust* adj = nullptr;
  if (has_adj && !batch.adjustments.empty()) {
    sample_start_ = upload(batch.adjust_start.data(), {rows + 1}, DType::kI32, sample_start_);
    sample_adj_ =
        upload(batch.adjustments.data(), {static_cast<int64_t>(batch.adjustments.size()) * 4},
               DType::kI32, sample_adj_);
    start = sample_start_.data<int32_t>();
    adj = reinterpret_cast<const KAdjust*>(sample_adj_.raw());
  }
  KTokenMasks masks;
  if (has_masks) {
    const int64_t n = static_cast<int64_t>(batch.token_masks.size() / token_mask_words(vocab));
    for (int32_t m : batch.mask_of) TACHYON_CHECK(m >= -1 && m < n, "sample: mask {} of {}", m, n);
    sample_mask_of_ = upload(batch.mask_of.data(), {rows}, DType::kI32, sample_mask_of_);
    masks.mask_of = sample_mask_of_.data<int32_t>();
    if (n > 0) {
      sample_masks_ =
          upload(batch.token_masks.data(), {static_cast<int64_t>(batch.token_masks.size())},
                 DType::kI32, sample_masks_);
      masks.masks = static_cast<const uint32_t*>(sample_masks_.raw());
    }
  }
  launch_sample(logits.data<float>(), rows, vocab, rows_meta, adj, start, masks,
                ids.data<int32_t>(), stream_);
  // The chosen tokens' log-probabilities: one more pass over the adjusted (and masked)
  // rows.
  launch_chosen_logprob(logits.data<float>(), rows, vocab, rows_meta, ids.data<int32_t>(),
                        logprobs.data<float>(), stream_);
}

std::vector<double> CudaBackend::sample_uniforms(const std::vector<RowSampling>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<double> out(rows.size());
  if (n == 0) return out;
  std::vector<KSampleRow> meta;
  for (const RowSampling& r : rows) meta.push_back(pack(r));
  Tensor m =
      upload(meta.data(), {n * static_cast<int64_t>(sizeof(KSampleRow) / 4)}, DType::kI32, {});
  Tensor u = alloc({n}, DType::kF64);
  launch_sample_uniforms(reinterpret_cast<const KSampleRow*>(m.raw()), n, u.data<double>(),
                         stream_);
  download(u, out.data());
  return out;
}

}  // namespace tachyon::cuda
