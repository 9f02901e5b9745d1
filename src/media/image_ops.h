// The geometric and arithmetic steps of transformers' image processors, in the forms
// their PIL-based ("slow") processors take.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "media/image.h"

namespace tachyon::media {

// transformers' center_crop: the window of height x width centred at
// ((H - height) // 2, (W - width) // 2); where the image is smaller than the window it
// is first zero-padded to cover it (centred, the odd pixel after).
RgbImage center_crop(const RgbImage& in, int height, int width);

// LLaVA's "pad" aspect ratio (expand2square): the image pasted onto a square of its
// longer side filled with `background`, at ((side - W) // 2, (side - H) // 2).
RgbImage pad_to_square(const RgbImage& in, std::array<uint8_t, 3> background);

// The background LLaVA pads with: each channel's int(mean * 255).
std::array<uint8_t, 3> mean_background(const std::array<float, 3>& mean);

// Rescale and normalize: (float(v * rescale) - mean[c]) / std[c] in float32, channels
// first: an F32 tensor [3, H, W].
struct Normalization {
  bool rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool normalize = true;
  std::array<float, 3> mean = {0.48145466f, 0.4578275f, 0.40821073f};  // OpenAI CLIP's
  std::array<float, 3> std = {0.26862954f, 0.26130258f, 0.27577711f};
};
Tensor to_pixel_values(const RgbImage& in, const Normalization& n);

}  // namespace tachyon::media
