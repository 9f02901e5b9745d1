// Launchers of the token-sampling kernels (sampling_topk.cu). Like kernels.h, free of
// backend/ops.h and core/error.h; the structs mirror backend/sampling.h's field for
// field (packed by CudaBackend::sample).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tachyon::cuda {

// RowSampling, as the kernel reads it.
struct KSampleRow {
  int32_t on_device = 0;  // 0: a host row (ids = -1, logits untouched)
  int32_t greedy = 0;
  float temperature = 1.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  uint32_t seed_lo = 0, seed_hi = 0;
  uint32_t seq_index = 0;
  uint32_t step_lo = 0, step_hi = 0;
};

// TokenAdjustment, byte for byte.
struct KAdjust {
  int32_t token;
  int32_t count;
  float bias;
  uint32_t flags;  // 1: in context (repetition penalty), 2: banned
};

// Result codes besides token ids (backend/sampling.h's kToken*).
inline constexpr int32_t kSampledOnHost = -1;
inline constexpr int32_t kSampledBadLogits = -2;
inline constexpr int32_t kSampledNoneAllowed = -3;

// A step's allowed-token masks: masks [n, ceil(vocab / 32)] (bit t % 32 of word t / 32:
// token t allowed) and mask_of [rows] (a row's mask, or -1 for none), on the device.
struct KTokenMasks {
  const uint32_t* masks = nullptr;
  const int32_t* mask_of = nullptr;  // null: no row has a mask
};

// One block per row of logits [rows, vocab] f32: applies the row's adjustments
// (adj[adj_start[r] .. adj_start[r + 1]), adj_start may be null) in place, then its
// mask (-inf on the disallowed tokens), then draws its token into ids[r]. rows_meta,
// adj, adj_start on the device; a null rows_meta makes every row greedy on the device
// (no parameters to upload).
void launch_sample(float* logits, int64_t rows, int64_t vocab, const KSampleRow* rows_meta,
                   const KAdjust* adj, const int32_t* adj_start, KTokenMasks masks, int32_t* ids,
                   cudaStream_t stream);

// Rows that are all greedy, on the device and without adjustments: the ids launch_sample
// gives them (the largest logit, lowest id on ties; kSampledBadLogits for a NaN or +inf,
// kSampledNoneAllowed for a row of -inf), each row scanned by greedy_splits(vocab)
// blocks. The last block of a row to finish (a counter per row in `counters`, zero
// between launches and left zero) merges the row's partials (`partial`:
// greedy_partial_bytes(rows, vocab)) and writes the token's log-probability (the
// log-softmax of the row at its largest logit; 0 for a row without a token) to
// logprobs[r], as launch_chosen_logprob would.
inline constexpr int64_t kGreedyMaxRows = 65535, kGreedyMaxVocab = 262144;
int greedy_splits(int64_t vocab);
size_t greedy_partial_bytes(int64_t rows, int64_t vocab);
void launch_sample_greedy(const float* logits, int64_t rows, int64_t vocab, void* partial,
                          int* counters, int32_t* ids, float* logprobs, cudaStream_t stream);

// After launch_sample or launch_sample_greedy on the same logits (adjusted in place):
// logprobs[r] = the log-probability of ids[r] in the distribution it was drawn from,
// log-softmax of the adjusted row over its temperature (1 when greedy or rows_meta is
// null), the whole vocabulary (top_k / top_p / min_p do not renormalize it); 0 for a row
// without a token (ids[r] < 0). One block per row (sampling.cu).
void launch_chosen_logprob(const float* logits, int64_t rows, int64_t vocab,
                           const KSampleRow* rows_meta, const int32_t* ids, float* logprobs,
                           cudaStream_t stream);

// out[i] = the uniform draw of rows_meta[i]'s key (for tests: equal to the host's
// rng_uniform bit for bit).
void launch_sample_uniforms(const KSampleRow* rows_meta, int64_t n, double* out,
                            cudaStream_t stream);

}  // namespace tachyon::cuda
