#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/dtype.h"
#include "core/error.h"

namespace tachyon {
namespace {

std::vector<double> base_inv_freq(double theta, int32_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (int32_t i = 0; i < dim / 2; ++i) f[i] = 1.0 / std::pow(theta, 2.0 * i / dim);
  return f;
}

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

RopeFrequencies yarn(const RopeConfig& r) {
  const int32_t dim = r.dim;
  const double base = r.theta, factor = r.factor;
  RopeFrequencies out;
  if (r.attention_factor) {
    out.attention_factor = *r.attention_factor;
  } else if (r.mscale != 0 && r.mscale_all_dim != 0) {
    out.attention_factor = yarn_mscale(factor, r.mscale) / yarn_mscale(factor, r.mscale_all_dim);
  } else {
    out.attention_factor = yarn_mscale(factor, 1.0);
  }
  const double orig = static_cast<double>(r.original_max_position);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(orig / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  out.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int32_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(base, 2.0 * i / dim);
    const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    out.inv_freq[i] =
        interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return out;
}

RopeFrequencies llama3(const RopeConfig& r) {
  RopeFrequencies out;
  out.inv_freq = base_inv_freq(r.theta, r.dim);
  const double old_len = static_cast<double>(r.original_max_position);
  const double low_wavelen = old_len / r.low_freq_factor;
  const double high_wavelen = old_len / r.high_freq_factor;
  for (double& f : out.inv_freq) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_wavelen) {
      f /= r.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f = (1 - smooth) * f / r.factor + smooth * f;
    }
  }
  return out;
}

}  // namespace

bool rope_length_dependent(const RopeConfig& rope) {
  return rope.type == RopeType::kDynamic || rope.type == RopeType::kLongrope ||
         rope.type == RopeType::kQwenDynamic;
}

bool rope_uses_prompt_length(const RopeConfig& rope) {
  return rope.type == RopeType::kQwenDynamic;
}

RopeFrequencies rope_frequencies(const RopeConfig& r, int64_t seq_len) {
  TACHYON_CHECK(r.dim > 0 && r.dim % 2 == 0, "rotary dim {}", r.dim);
  RopeFrequencies out;
  switch (r.type) {
    case RopeType::kDefault:
      out.inv_freq = base_inv_freq(r.theta, r.dim);
      break;
    case RopeType::kLinear:
      out.inv_freq = base_inv_freq(r.theta, r.dim);
      for (double& f : out.inv_freq) f /= r.factor;
      break;
    case RopeType::kDynamic: {
      const double max_pos = static_cast<double>(r.max_position_embeddings);
      const double len = std::max(static_cast<double>(seq_len), max_pos);
      const double base = r.theta * std::pow(r.factor * len / max_pos - (r.factor - 1),
                                             static_cast<double>(r.dim) / (r.dim - 2));
      out.inv_freq = base_inv_freq(base, r.dim);
      break;
    }
    case RopeType::kYarn:
      out = yarn(r);
      break;
    case RopeType::kLongrope: {
      const double orig = static_cast<double>(r.original_max_position);
      if (r.attention_factor) {
        out.attention_factor = *r.attention_factor;
      } else {
        out.attention_factor =
            r.factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(r.factor) / std::log(orig));
      }
      const auto& ext = seq_len > r.original_max_position ? r.long_factor : r.short_factor;
      TACHYON_CHECK_EQ(static_cast<int32_t>(ext.size()), r.dim / 2);
      out.inv_freq = base_inv_freq(r.theta, r.dim);
      for (int32_t i = 0; i < r.dim / 2; ++i) out.inv_freq[i] /= ext[i];
      break;
    }
    case RopeType::kLlama3:
      out = llama3(r);
      break;
    case RopeType::kQwenDynamic: {
      // Evaluated as the published code does (math.log(x, 2) is log(x) / log(2)), so
      // that the ceiling lands on the same side at exact powers of two.
      const double ratio =
          static_cast<double>(seq_len) / static_cast<double>(r.original_max_position);
      const double context_value = std::log(ratio) / std::log(2.0) + 1;
      const double alpha = std::max(std::pow(2.0, std::ceil(context_value)) - 1, 1.0);
      const double base = r.theta * std::pow(alpha, static_cast<double>(r.dim) / (r.dim - 2));
      out.inv_freq = base_inv_freq(base, r.dim);
      break;
    }
  }
  if (r.inv_freq_f16) {
    // Rounded as torch rounds a float32 tensor with .half().
    for (double& f : out.inv_freq) f = f16_to_f32(f32_to_f16(static_cast<float>(f)));
  }
  return out;
}

RopeTable::RopeTable(const RopeConfig& rope)
    : rope_(rope),
      two_d_(rope.style == RotaryStyle::kHalf2D),
      length_dependent_(rope_length_dependent(rope)) {
  TACHYON_CHECK(!two_d_ || (rope.dim % 4 == 0 && !length_dependent_),
                "2-D rotary over {} dims (type {})", rope.dim, rope_type_name(rope.type));
  RopeConfig freq = rope_;
  if (two_d_) freq.dim = rope_.dim / 2;  // each half is a rotary of its own
  cached_ = rope_frequencies(freq, rope_.max_position_embeddings);
  cached_len_ = length_dependent_ ? rope_.max_position_embeddings : 0;
}

void RopeTable::fill(const int32_t* positions, const int32_t* seq_lens, int64_t n, float* out,
                     const int32_t* block_positions) {
  const size_t f = cached_.inv_freq.size();  // frequencies: a row is f cosines, f sines
  if (two_d_) {
    TACHYON_CHECK(block_positions != nullptr, "a 2-D rotary needs block positions");
    for (int64_t t = 0; t < n; ++t) {
      float* row = out + t * rope_.dim;
      const float* p = cached_row(positions[t]);
      const float* b = cached_row(block_positions[t]);
      std::memcpy(row, p, f * sizeof(float));
      std::memcpy(row + f, b, f * sizeof(float));
      std::memcpy(row + 2 * f, p + f, f * sizeof(float));
      std::memcpy(row + 3 * f, b + f, f * sizeof(float));
    }
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    float* row = out + t * rope_.dim;
    if (length_dependent_) {
      if (seq_lens[t] != cached_len_) {
        // Frequencies change only across the original-length threshold (longrope) or
        // with each new length past it (dynamic); recompute when the length differs.
        cached_ = rope_frequencies(rope_, seq_lens[t]);
        cached_len_ = seq_lens[t];
      }
      compute_row(positions[t], row);
      continue;
    }
    std::memcpy(row, cached_row(positions[t]), 2 * f * sizeof(float));
  }
}

void RopeTable::rows(int32_t n, float* out) {
  TACHYON_CHECK(position_only(), "rotary rows of a {} table", two_d_ ? "2-D" : "length-dependent");
  const size_t width = 2 * cached_.inv_freq.size();
  for (int32_t p = 0; p < n; ++p)
    std::memcpy(out + static_cast<size_t>(p) * width, cached_row(p), width * sizeof(float));
}

const float* RopeTable::cached_row(int32_t position) {
  TACHYON_CHECK(position >= 0, "rotary position {}", position);
  const size_t width = 2 * cached_.inv_freq.size();
  const size_t pi = static_cast<size_t>(position);
  if (pi >= row_ready_.size()) {
    const size_t grow = std::max(pi + 1, row_ready_.size() * 2);
    row_ready_.resize(grow, 0);
    rows_.resize(grow * width);
  }
  float* row = rows_.data() + pi * width;
  if (!row_ready_[pi]) {
    compute_row(position, row);
    row_ready_[pi] = 1;
  }
  return row;
}

void RopeTable::compute_row(double position, float* row) const {
  const size_t f = cached_.inv_freq.size();
  for (size_t i = 0; i < f; ++i) {
    const double a = position * cached_.inv_freq[i];
    row[i] = static_cast<float>(std::cos(a) * cached_.attention_factor);
    row[f + i] = static_cast<float>(std::sin(a) * cached_.attention_factor);
  }
}

std::vector<float> alibi_slopes(int32_t num_heads, AlibiStyle style, double alibi_bias_max) {
  TACHYON_CHECK(num_heads > 0, "alibi heads {}", num_heads);
  std::vector<float> slopes;
  if (style == AlibiStyle::kBloom) {
    int32_t closest = 1;
    while (closest * 2 <= num_heads) closest *= 2;
    const double base = std::pow(2.0, -8.0 / closest);
    for (int32_t i = 1; i <= closest; ++i) slopes.push_back(static_cast<float>(std::pow(base, i)));
    if (closest != num_heads) {
      const double extra_base = std::pow(2.0, -8.0 / (2 * closest));
      const int32_t remaining = std::min(closest, num_heads - closest);
      for (int32_t i = 0; i < remaining; ++i)
        slopes.push_back(static_cast<float>(std::pow(extra_base, 2 * i + 1)));
    }
  } else {
    int32_t pow2 = 1;
    while (pow2 < num_heads) pow2 *= 2;
    std::vector<float> all;
    for (int32_t i = 1; i <= pow2; ++i)
      all.push_back(static_cast<float>(1.0 / std::pow(2.0, i * (alibi_bias_max / pow2))));
    if (pow2 != num_heads) {
      for (int32_t i = 1; i < pow2; i += 2) slopes.push_back(all[i]);
      for (int32_t i = 0; i < pow2; i += 2) slopes.push_back(all[i]);
      slopes.resize(static_cast<size_t>(num_heads));
    } else {
      slopes = all;
    }
  }
  return slopes;
}

}  // namespace tachyon
