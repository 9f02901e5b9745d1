// LlavaNextImageProcessor: "anyres" tiling. The image is resized (aspect ratio kept) to
// fit the grid resolution that keeps the most of it and wastes the least, zero-padded
// to that resolution, cut into crop-size tiles in row order, and preceded by the whole
// image resized to a square; each of those then goes through the CLIP steps (resize,
// center crop, rescale, normalize). pixel_values: [1 + tiles, 3, H, W].
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "media/processor_config.h"

namespace tachyon::media {

std::pair<int64_t, int64_t> llava_next_best_resolution(
    int64_t height, int64_t width, const std::vector<std::pair<int64_t, int64_t>>& pinpoints) {
  std::pair<int64_t, int64_t> best{0, 0};
  int64_t best_effective = 0;
  double least_wasted = INFINITY;
  for (const auto& [h, w] : pinpoints) {
    const double scale = std::min(double(w) / double(width), double(h) / double(height));
    const int64_t dw = int64_t(double(width) * scale), dh = int64_t(double(height) * scale);
    const int64_t effective = std::min(dw * dh, width * height);
    const double wasted = double(w * h - effective);
    if (effective > best_effective || (effective == best_effective && wasted < least_wasted)) {
      best_effective = effective;
      least_wasted = wasted;
      best = {h, w};
    }
  }
  return best;
}

namespace detail {
namespace {

// The size the image takes inside a target resolution, its aspect ratio kept.
std::pair<int, int> fit_size(int height, int width, int64_t th, int64_t tw) {
  const double scale_w = double(tw) / width, scale_h = double(th) / height;
  if (scale_w < scale_h)
    return {int(std::min<int64_t>(int64_t(std::ceil(height * scale_w)), th)), int(tw)};
  return {int(th), int(std::min<int64_t>(int64_t(std::ceil(width * scale_h)), tw))};
}

class LlavaNextProcessor : public ImageProcessor {
 public:
  explicit LlavaNextProcessor(const Json& c) : tile_steps_(make_clip_processor(c, false)) {
    resample_ = config_resample(c);
    if (auto it = c.find("size"); it != c.end() && it->is_object() && it->contains("height")) {
      square_h_ = config_int(*it, "height", 336, 1, 1 << 16);
      square_w_ = config_int(*it, "width", 336, 1, 1 << 16);
    } else if (it != c.end() && it->is_object()) {
      square_h_ = square_w_ = config_int(*it, "shortest_edge", 336, 1, 1 << 16);
    }
    if (auto it = c.find("crop_size"); it != c.end() && it->is_object())
      tile_ = config_int(*it, "height", 336, 1, 1 << 16);
    else
      tile_ = config_int(c, "crop_size", 336, 1, 1 << 16);
    auto it = c.find("image_grid_pinpoints");
    if (it == c.end() || !it->is_array() || it->empty())
      raise<InvalidArgument>(
          "image processor config: image_grid_pinpoints must be a list of [h, w]");
    for (const Json& p : *it) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() ||
          !p[1].is_number_integer() || p[0].get<int64_t>() < 1 || p[1].get<int64_t>() < 1 ||
          p[0].get<int64_t>() > (1 << 14) || p[1].get<int64_t>() > (1 << 14))
        raise<InvalidArgument>(
            "image processor config: image_grid_pinpoints must be a list of [h, w]");
      pinpoints_.emplace_back(p[0].get<int64_t>(), p[1].get<int64_t>());
    }
  }

  std::string name() const override { return "LlavaNextImageProcessor"; }

  ProcessedImage process(const RgbImage& image) const override {
    const auto [th, tw] = llava_next_best_resolution(image.height, image.width, pinpoints_);
    const auto [nh, nw] = fit_size(image.height, image.width, th, tw);
    const RgbImage fitted = resize(image, nw, nh, resample_);
    // Zero padding, split evenly (the odd pixel after).
    RgbImage padded{static_cast<int>(tw), static_cast<int>(th)};
    const int top = int(th - nh) / 2, left = int(tw - nw) / 2;
    for (int y = 0; y < nh; ++y)
      std::memcpy(padded.row(top + y) + size_t(left) * 3, fitted.row(y), size_t(nw) * 3);
    std::vector<RgbImage> views;
    views.push_back(resize(image, int(square_w_), int(square_h_), resample_));
    for (int64_t y = 0; y < th; y += tile_)
      for (int64_t x = 0; x < tw; x += tile_) {
        const int h = int(std::min(tile_, th - y)), w = int(std::min(tile_, tw - x));
        RgbImage t(w, h);
        for (int r = 0; r < h; ++r)
          std::memcpy(t.row(r), padded.row(int(y) + r) + size_t(x) * 3, size_t(w) * 3);
        views.push_back(std::move(t));
      }
    std::vector<Tensor> planes;
    for (const RgbImage& v : views) planes.push_back(tile_steps_->process(v).pixel_values);
    const Shape& s = planes[0].shape();
    for (const Tensor& p : planes)
      if (p.shape() != s)
        raise<InvalidArgument>("image of {}x{}: its tiles come out in different sizes", image.width,
                               image.height);
    Tensor out = Tensor::empty({int64_t(planes.size()), s[0], s[1], s[2]}, DType::kF32);
    const size_t n = size_t(planes[0].numel());
    for (size_t i = 0; i < planes.size(); ++i)
      std::memcpy(out.data<float>() + i * n, planes[i].data<float>(), n * sizeof(float));
    ProcessedImage result{out, {}};
    result.image_size = {image.height, image.width};
    return result;
  }

 private:
  std::unique_ptr<ImageProcessor> tile_steps_;
  Resample resample_ = Resample::kBicubic;
  int64_t square_h_ = 336, square_w_ = 336, tile_ = 336;
  std::vector<std::pair<int64_t, int64_t>> pinpoints_;
};

}  // namespace

std::unique_ptr<ImageProcessor> make_llava_next_processor(const Json& c) {
  return std::make_unique<LlavaNextProcessor>(c);
}

}  // namespace detail
}  // namespace tachyon::media
