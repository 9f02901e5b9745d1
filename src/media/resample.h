// PIL's Image.resize for 8-bit RGB images, exactly: a separable convolution, the
// horizontal pass first, then the vertical one (a pass skipped when its size does not
// change). Each output sample is a weighted sum of the input samples within the
// filter's support around its centre, the support widened by the downscale factor (so
// downscaling averages, antialiased); the weights are normalised to sum to one and
// rounded to fixed point (22 fraction bits); the sum starts at one half, and the result
// is floored and clipped to 0..255 after each pass.
#pragma once

#include <string_view>

#include "media/image.h"

namespace tachyon::media {

// PIL's resampling filters that the processors use, numbered as PIL numbers them
// (preprocessor configs name them by number: "resample": 3).
enum class Resample { kBilinear = 2, kBicubic = 3 };

// The filter PIL numbers `pil_number`; throws InvalidArgument for one not implemented.
Resample resample_from_pil(int pil_number);
std::string_view resample_name(Resample r);

// The image resized to width x height (each at least 1).
RgbImage resize(const RgbImage& in, int width, int height, Resample filter);

}  // namespace tachyon::media
