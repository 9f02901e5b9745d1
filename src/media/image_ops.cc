#include "media/image_ops.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tachyon::media {
namespace {

int floor_div2(int v) {
  return v >= 0 ? v / 2 : -((-v + 1) / 2);
}

}  // namespace

RgbImage center_crop(const RgbImage& in, int height, int width) {
  if (height < 1 || width < 1)
    raise<InvalidArgument>("center crop to {}x{}: sizes must be positive", width, height);
  const int top = floor_div2(in.height - height), left = floor_div2(in.width - width);
  if (top >= 0 && left >= 0) {
    RgbImage out(width, height);
    for (int y = 0; y < height; ++y)
      std::memcpy(out.row(y), in.row(top + y) + size_t(left) * 3, size_t(width) * 3);
    return out;
  }
  // The image padded with zeros to at least the window's size, centred (rounding the
  // padding before it up), then cropped.
  const int ph = std::max(height, in.height), pw = std::max(width, in.width);
  const int top_pad = (ph - in.height + 1) / 2, left_pad = (pw - in.width + 1) / 2;
  RgbImage padded(pw, ph);
  for (int y = 0; y < in.height; ++y)
    std::memcpy(padded.row(top_pad + y) + size_t(left_pad) * 3, in.row(y), size_t(in.width) * 3);
  const int y0 = std::max(0, top + top_pad), y1 = std::min(ph, top + top_pad + height);
  const int x0 = std::max(0, left + left_pad), x1 = std::min(pw, left + left_pad + width);
  RgbImage out(x1 - x0, y1 - y0);
  for (int y = y0; y < y1; ++y)
    std::memcpy(out.row(y - y0), padded.row(y) + size_t(x0) * 3, size_t(out.width) * 3);
  return out;
}

RgbImage pad_to_square(const RgbImage& in, std::array<uint8_t, 3> background) {
  if (in.width == in.height) return in;
  const int side = std::max(in.width, in.height);
  RgbImage out(side, side);
  for (size_t i = 0; i < out.pixels.size(); i += 3)
    std::memcpy(&out.pixels[i], background.data(), 3);
  const int x0 = (side - in.width) / 2, y0 = (side - in.height) / 2;
  for (int y = 0; y < in.height; ++y)
    std::memcpy(out.row(y0 + y) + size_t(x0) * 3, in.row(y), size_t(in.width) * 3);
  return out;
}

std::array<uint8_t, 3> mean_background(const std::array<float, 3>& mean) {
  std::array<uint8_t, 3> bg{};
  for (int c = 0; c < 3; ++c) {
    const double v = double(mean[c]) * 255.0;
    bg[c] = uint8_t(std::clamp(int(v), 0, 255));  // int() truncates, as Python's
  }
  return bg;
}

Tensor to_pixel_values(const RgbImage& in, const Normalization& n) {
  Tensor t = Tensor::empty({3, in.height, in.width}, DType::kF32);
  float* out = t.data<float>();
  const size_t plane = size_t(in.height) * in.width;
  for (int c = 0; c < 3; ++c) {
    float lut[256];
    for (int v = 0; v < 256; ++v) {
      float x = n.rescale ? float(double(v) * n.rescale_factor) : float(v);
      if (n.normalize) x = (x - n.mean[c]) / n.std[c];
      lut[v] = x;
    }
    for (size_t i = 0; i < plane; ++i) out[c * plane + i] = lut[in.pixels[3 * i + c]];
  }
  return t;
}

}  // namespace tachyon::media
