// Per-row sampling parameters for choosing tokens on the model's device, so that only
// token ids (not [rows, vocab] logits) cross to the host. Plain data shared by the
// engine <-> model contract (model/forward.h) and the backend contract (backend/ops.h).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tachyon {

// How one logits row becomes a token.
struct RowSampling {
  enum class Mode : uint8_t {
    kHost,    // the row's logits go back to the host (logprobs, beams, ...)
    kDevice,  // a token is drawn on the device; only its id goes back
  };
  Mode mode = Mode::kHost;
  bool greedy = false;  // argmax (lowest id on ties); the fields below are then unused
  float temperature = 1.0f;
  int32_t top_k = 0;   // 0 (or >= vocab): off
  float top_p = 1.0f;  // 1: off
  float min_p = 0.0f;  // 0: off
  // Penalty parameters; which tokens they touch is in the row's TokenAdjustments.
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // The draw's counter-based RNG key: Philox4x32-10 with key = seed and counter =
  // (step lo, step hi, seq_index, 0), as engine/rng.h's rng_uniform (purpose 0).
  uint64_t seed = 0;
  uint32_t seq_index = 0;
  uint64_t step = 0;
};

// One token's logits processing before the draw, applied in this order (as the host's
// process_logits): repetition penalty when kInContext (x < 0 ? x * rp : x / rp);
// presence + frequency * count subtracted when count > 0; bias added; -inf when kBanned.
struct TokenAdjustment {
  enum Flags : uint32_t { kInContext = 1, kBanned = 2 };
  int32_t token = 0;
  int32_t count = 0;  // occurrences among the generated tokens
  float bias = 0.0f;
  uint32_t flags = 0;
};

// An allowed-token bitmask over a vocabulary of V tokens (structured output): token t
// is allowed when bit t % 32 of word t / 32 is set; token_mask_words(V) words.
inline int64_t token_mask_words(int64_t vocab) {
  return (vocab + 31) / 32;
}
inline bool token_allowed(std::span<const uint32_t> mask, int32_t token) {
  return ((mask[static_cast<size_t>(token) / 32] >> (static_cast<uint32_t>(token) % 32)) & 1u) != 0;
}
// Sets the disallowed tokens of a row of logits [vocab] to -inf.
inline void apply_token_mask(float* logits, int32_t vocab, std::span<const uint32_t> mask) {
  for (int32_t t = 0; t < vocab; ++t)
    if (!token_allowed(mask, t)) logits[t] = -std::numeric_limits<float>::infinity();
}

// The sampling side of a step: per logits row, its parameters and its adjustments
// (adjustments[adjust_start[r] .. adjust_start[r + 1]), each token at most once a row).
struct SamplingBatch {
  std::vector<RowSampling> rows;
  std::vector<TokenAdjustment> adjustments;
  std::vector<int32_t> adjust_start;  // [rows.size() + 1]; empty: no adjustments

  // Optional allowed-token masks, applied to kDevice rows after their adjustments (the
  // disallowed tokens become -inf; none allowed: kTokenNoneAllowed). token_masks holds
  // the masks [number of masks, token_mask_words(vocab)]; mask_of [rows.size()] names
  // each row's mask (an index into them, or -1 for none). Both empty: no row has one
  // (nothing is uploaded). A kHost row's mask is the host's to apply.
  std::vector<uint32_t> token_masks;
  std::vector<int32_t> mask_of;

  bool empty() const { return rows.empty(); }
  bool any_on_device() const {
    for (const RowSampling& r : rows)
      if (r.mode == RowSampling::Mode::kDevice) return true;
    return false;
  }
};

// Token id results of device sampling besides real ids.
inline constexpr int32_t kTokenOnHost = -1;       // a kHost row: its logits came back
inline constexpr int32_t kTokenBadLogits = -2;    // the row held NaN or +inf
inline constexpr int32_t kTokenNoneAllowed = -3;  // every token was banned (-inf)

}  // namespace tachyon
