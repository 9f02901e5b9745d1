// WebP through libwebp: lossy, lossless, with or without alpha (dropped: the colour
// samples as stored, as PIL's RGBA-to-RGB conversion keeps them). Animated WebP is
// refused.
#include <webp/decode.h>

#include "core/error.h"
#include "media/decoders.h"

namespace tachyon::media::detail {

RgbImage decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA)
    raise<InvalidArgument>("image: corrupt WebP: the data ends before the header does");
  if (st != VP8_STATUS_OK)
    raise<InvalidArgument>("image: corrupt WebP: bad header (status {})", int(st));
  if (features.has_animation) raise<InvalidArgument>("image: animated WebP is not supported");
  check_dimensions("WebP", features.width, features.height, limits);
  RgbImage out(features.width, features.height);
  if (!WebPDecodeRGBInto(bytes.data(), bytes.size(), out.pixels.data(), out.pixels.size(),
                         out.width * 3))
    raise<InvalidArgument>("image: corrupt or truncated WebP");
  return out;
}

}  // namespace tachyon::media::detail
