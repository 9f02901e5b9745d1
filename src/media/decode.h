// Image decoding: JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp), the format
// told by the bytes' signature, never by a name. The result is what PIL's
// `Image.open(f).convert("RGB")` gives: alpha dropped (not composited), palettes
// expanded, grayscale replicated, 16-bit samples narrowed as PIL narrows them (the high
// byte; 16-bit grayscale clipped at 255), Adobe CMYK/YCCK JPEGs converted with PIL's
// formula. EXIF orientation is not applied (PIL's open does not either).
//
// The limits are checked from the header, before any pixel is decoded. Every failure
// (over a limit, an unsupported or unknown format, corrupt or truncated bytes) is an
// InvalidArgument naming it; the libraries' own error exits are caught.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "media/image.h"

namespace tachyon::media {

enum class ImageFormat {
  kUnknown,
  kJpeg,
  kPng,
  kWebp,
  kGif,
  kBmp,
  kTiff,
  kIco,
  kAvif,
  kHeic,
  kQoi,
  kJpeg2000,
  kPsd
};

// The format the signature names (kUnknown when none matches).
ImageFormat detect_image_format(std::span<const uint8_t> bytes);
std::string_view image_format_name(ImageFormat f);
// The media type of a format ("image/jpeg"...; empty for kUnknown).
std::string_view image_media_type(ImageFormat f);
bool is_decodable(ImageFormat f);

struct DecodeLimits {
  int64_t max_bytes = int64_t{32} << 20;  // the encoded size
  int64_t max_pixels = 64'000'000;        // width * height (PIL's decompression-bomb guard)
};

RgbImage decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

}  // namespace tachyon::media
