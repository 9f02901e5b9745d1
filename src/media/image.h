// An 8-bit RGB image, the form every decoder gives and the preprocessing takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tachyon::media {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // rows top to bottom, 3 bytes (R, G, B) a pixel

  RgbImage() = default;
  RgbImage(int w, int h) : width(w), height(h), pixels(size_t(w) * size_t(h) * 3) {}
  uint8_t* row(int y) { return pixels.data() + size_t(y) * size_t(width) * 3; }
  const uint8_t* row(int y) const { return pixels.data() + size_t(y) * size_t(width) * 3; }
};

}  // namespace tachyon::media
