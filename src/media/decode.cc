#include "media/decode.h"

#include <cstring>

#include "core/error.h"
#include "media/decoders.h"

namespace tachyon::media {
namespace {

bool starts_with(std::span<const uint8_t> b, size_t at, std::string_view sig) {
  return b.size() >= at + sig.size() && std::memcmp(b.data() + at, sig.data(), sig.size()) == 0;
}

}  // namespace

ImageFormat detect_image_format(std::span<const uint8_t> b) {
  using F = ImageFormat;
  if (starts_with(b, 0, "\xFF\xD8\xFF")) return F::kJpeg;
  if (starts_with(b, 0, "\x89PNG\r\n\x1A\n")) return F::kPng;
  if (starts_with(b, 0, "RIFF") && starts_with(b, 8, "WEBP")) return F::kWebp;
  if (starts_with(b, 0, "GIF87a") || starts_with(b, 0, "GIF89a")) return F::kGif;
  if (starts_with(b, 0, "BM")) return F::kBmp;
  if (starts_with(b, 0, std::string_view("II*\0", 4)) ||
      starts_with(b, 0, std::string_view("MM\0*", 4)))
    return F::kTiff;
  if (starts_with(b, 0, std::string_view("\0\0\1\0", 4))) return F::kIco;
  if (starts_with(b, 4, "ftyp")) {
    if (starts_with(b, 8, "avif") || starts_with(b, 8, "avis")) return F::kAvif;
    if (starts_with(b, 8, "heic") || starts_with(b, 8, "heix") || starts_with(b, 8, "mif1") ||
        starts_with(b, 8, "msf1"))
      return F::kHeic;
  }
  if (starts_with(b, 0, "qoif")) return F::kQoi;
  if (starts_with(b, 0, std::string_view("\0\0\0\x0CjP  ", 8)) ||
      starts_with(b, 0, "\xFF\x4F\xFF\x51"))
    return F::kJpeg2000;
  if (starts_with(b, 0, "8BPS")) return F::kPsd;
  return F::kUnknown;
}

std::string_view image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kTiff:
      return "TIFF";
    case ImageFormat::kIco:
      return "ICO";
    case ImageFormat::kAvif:
      return "AVIF";
    case ImageFormat::kHeic:
      return "HEIC";
    case ImageFormat::kQoi:
      return "QOI";
    case ImageFormat::kJpeg2000:
      return "JPEG 2000";
    case ImageFormat::kPsd:
      return "PSD";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

std::string_view image_media_type(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg:
      return "image/jpeg";
    case ImageFormat::kPng:
      return "image/png";
    case ImageFormat::kWebp:
      return "image/webp";
    case ImageFormat::kGif:
      return "image/gif";
    case ImageFormat::kBmp:
      return "image/bmp";
    case ImageFormat::kTiff:
      return "image/tiff";
    case ImageFormat::kIco:
      return "image/vnd.microsoft.icon";
    case ImageFormat::kAvif:
      return "image/avif";
    case ImageFormat::kHeic:
      return "image/heic";
    case ImageFormat::kQoi:
      return "image/qoi";
    case ImageFormat::kJpeg2000:
      return "image/jp2";
    case ImageFormat::kPsd:
      return "image/vnd.adobe.photoshop";
    case ImageFormat::kUnknown:
      break;
  }
  return "";
}

bool is_decodable(ImageFormat f) {
  return f == ImageFormat::kJpeg || f == ImageFormat::kPng || f == ImageFormat::kWebp;
}

RgbImage decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.empty()) raise<InvalidArgument>("image: no bytes");
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes)
    raise<InvalidArgument>("image: {} bytes, over the limit of {} bytes", bytes.size(),
                           limits.max_bytes);
  const ImageFormat f = detect_image_format(bytes);
  switch (f) {
    case ImageFormat::kJpeg:
      return detail::decode_jpeg(bytes, limits);
    case ImageFormat::kPng:
      return detail::decode_png(bytes, limits);
    case ImageFormat::kWebp:
      return detail::decode_webp(bytes, limits);
    case ImageFormat::kUnknown:
      raise<InvalidArgument>("image: not a known image format (JPEG, PNG and WebP are supported)");
    default:
      raise<InvalidArgument>("image: {} is not supported (JPEG, PNG and WebP are)",
                             image_format_name(f));
  }
}

namespace detail {

void check_dimensions(const char* format, int64_t width, int64_t height,
                      const DecodeLimits& limits) {
  if (width <= 0 || height <= 0)
    raise<InvalidArgument>("image: {} of {}x{} pixels is empty", format, width, height);
  if (width * height > limits.max_pixels)
    raise<InvalidArgument>("image: {} of {}x{} = {} pixels, over the limit of {} pixels", format,
                           width, height, width * height, limits.max_pixels);
}

}  // namespace detail
}  // namespace tachyon::media
