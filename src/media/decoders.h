// The per-format decoders behind decode_image (media/decode.h). Each checks the
// dimensions against limits.max_pixels before decoding a pixel and throws
// InvalidArgument for anything it cannot decode.
#pragma once

#include <cstdint>
#include <span>

#include "media/decode.h"

namespace tachyon::media::detail {

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits);
RgbImage decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits);
RgbImage decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits);

// Throws when a width x height image is empty or over the pixel limit.
void check_dimensions(const char* format, int64_t width, int64_t height,
                      const DecodeLimits& limits);

}  // namespace tachyon::media::detail
