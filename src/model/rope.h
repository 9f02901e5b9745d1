// Rotary frequencies for every scaling type (default, linear, dynamic NTK, yarn,
// longrope, llama3), following transformers' modeling_rope_utils, and ALiBi slopes.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace tachyon {

// Inverse frequencies [rope.dim / 2] and the attention factor that multiplies cos and
// sin, for a sequence whose length (max position + 1) is seq_len. Only dynamic and
// longrope depend on seq_len.
struct RopeFrequencies {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};
RopeFrequencies rope_frequencies(const RopeConfig& rope, int64_t seq_len);

// True when the frequencies depend on the sequence length (dynamic, longrope, Qwen's
// dynamic NTK).
bool rope_length_dependent(const RopeConfig& rope);
// True when that length is the sequence's prompt length rather than its current length
// (Qwen's dynamic NTK fixes the frequencies at prefill): the decoder passes
// ForwardBatch::prompt_lens when the engine gives them.
bool rope_uses_prompt_length(const RopeConfig& rope);

// Fills cos/sin rows for the rotary op: out[t] = [cos(p f_0..), sin(p f_0..)] * factor,
// with p = positions[t] and the frequencies of sequence length seq_lens[t].
// Style kHalf2D (GLM's 2-D positions): each half of the rotated dims is a rotary of
// dim / 2 with its own position, p = positions[t] for the first and
// b = block_positions[t] for the second: out[t] = [cos(p f), cos(b f), sin(p f),
// sin(b f)] over the dim / 4 frequencies f of a rotary of dim / 2.
// Where the frequencies do not depend on the length, each position's cosines and sines
// are computed once (double precision) and copied afterwards (a 2-D row from two of
// them): a 1024-token prefill would otherwise spend milliseconds of host time on them.
class RopeTable {
 public:
  explicit RopeTable(const RopeConfig& rope);
  void fill(const int32_t* positions, const int32_t* seq_lens, int64_t n, float* out,
            const int32_t* block_positions = nullptr);
  int32_t dim() const { return rope_.dim; }
  // Whether a row depends on the position alone (not 2-D, not length-dependent): then
  // rows() gives the rows of every position and a step may gather its rows from them.
  bool position_only() const { return !two_d_ && !length_dependent_; }
  // The rows of positions [0, n) into out [n, dim] (position_only() only).
  void rows(int32_t n, float* out);

 private:
  // The f cosines then f sines of the frequency table at a position (f = the table's
  // frequencies): computed into row, or cached.
  void compute_row(double position, float* row) const;
  const float* cached_row(int32_t position);

  RopeConfig rope_;
  bool two_d_;
  bool length_dependent_;
  int64_t cached_len_ = -1;
  RopeFrequencies cached_;
  std::vector<float> rows_;         // [positions computed so far, 2 f]
  std::vector<uint8_t> row_ready_;  // per position
};

// ALiBi slopes per head, computed as Bloom/Falcon (2^(-8/n) powers, with interleaved
// extra slopes for a non-power-of-two head count) or as MPT (alibi_bias_max).
std::vector<float> alibi_slopes(int32_t num_heads, AlibiStyle style, double alibi_bias_max);

}  // namespace tachyon
