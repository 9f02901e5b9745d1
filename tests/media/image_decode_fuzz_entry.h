// The entry point of the image-decoder fuzz target, shared with the corpus replay test
// so the same code runs under libFuzzer (clang) and in the ordinary test binary.
//
// An input is the bytes of an image file. decode_image (at a 4-megapixel limit, to keep
// each run fast) either gives an image whose pixel buffer matches its dimensions or
// refuses with InvalidArgument. A bug, reported by abort() with a message, is any other
// exception or an inconsistent image; sanitizer reports are bugs too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>

#include "core/error.h"
#include "media/decode.h"

namespace tachyon::fuzz {

[[noreturn]] inline void image_decode_bug(const char* what) {
  std::fprintf(stderr, "image decode fuzz: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// True when the input decoded.
inline bool image_decode_one(const uint8_t* data, size_t size) {
  media::DecodeLimits limits;
  limits.max_pixels = 4'000'000;
  try {
    const media::RgbImage img = media::decode_image(std::span<const uint8_t>(data, size), limits);
    if (img.width <= 0 || img.height <= 0 ||
        img.pixels.size() != size_t(img.width) * size_t(img.height) * 3)
      image_decode_bug("an image whose buffer does not match its size");
    return true;
  } catch (const InvalidArgument&) {
    return false;
  } catch (const std::exception& e) {
    image_decode_bug(e.what());
  }
}

}  // namespace tachyon::fuzz
