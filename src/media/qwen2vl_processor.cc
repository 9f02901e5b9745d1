// Qwen2VLImageProcessor: smart_resize, resize, rescale, normalize and Qwen2-VL's patch
// order.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "media/processor_config.h"
#include "media/qwen2vl_processor.h"

namespace tachyon::media {

std::pair<int64_t, int64_t> qwen2vl_smart_resize(int64_t height, int64_t width, int64_t factor,
                                                 int64_t min_pixels, int64_t max_pixels) {
  if (height < 1 || width < 1 || factor < 1)
    raise<InvalidArgument>("smart_resize: {}x{} with factor {}", width, height, factor);
  if (double(std::max(height, width)) / double(std::min(height, width)) > 200)
    raise<InvalidArgument>("image of {}x{}: the aspect ratio must be at most 200", width, height);
  // Python's round(): halves to even, as nearbyint in the default rounding mode.
  int64_t h = int64_t(std::nearbyint(double(height) / double(factor))) * factor;
  int64_t w = int64_t(std::nearbyint(double(width) / double(factor))) * factor;
  if (h * w > max_pixels) {
    const double beta = std::sqrt(double(height * width) / double(max_pixels));
    h = std::max(factor, int64_t(std::floor(double(height) / beta / double(factor))) * factor);
    w = std::max(factor, int64_t(std::floor(double(width) / beta / double(factor))) * factor);
  } else if (h * w < min_pixels) {
    const double beta = std::sqrt(double(min_pixels) / double(height * width));
    h = int64_t(std::ceil(double(height) * beta / double(factor))) * factor;
    w = int64_t(std::ceil(double(width) * beta / double(factor))) * factor;
  }
  if (h < factor || w < factor || h > (1 << 16) || w > (1 << 16))
    raise<InvalidArgument>("image of {}x{}: smart_resize gives {}x{}", width, height, w, h);
  return {h, w};
}

namespace detail {
namespace {

class Qwen2VlProcessor : public ImageProcessor {
 public:
  explicit Qwen2VlProcessor(const Json& c) {
    resize_ = config_bool(c, "do_resize", true);
    resample_ = config_resample(c);
    norm_ = config_normalization(c);
    patch_ = config_int(c, "patch_size", 14, 1, 1024);
    temporal_ = config_int(c, "temporal_patch_size", 2, 1, 16);
    merge_ = config_int(c, "merge_size", 2, 1, 64);
    if (auto it = c.find("size"); it != c.end() && it->is_object()) {
      min_pixels_ = config_int(*it, "shortest_edge", min_pixels_, 1, int64_t{1} << 32);
      max_pixels_ = config_int(*it, "longest_edge", max_pixels_, 1, int64_t{1} << 32);
    }
    min_pixels_ = config_int(c, "min_pixels", min_pixels_, 1, int64_t{1} << 32);
    max_pixels_ = config_int(c, "max_pixels", max_pixels_, 1, int64_t{1} << 32);
    if (min_pixels_ > max_pixels_)
      raise<InvalidArgument>("image processor config: min_pixels {} over max_pixels {}",
                             min_pixels_, max_pixels_);
  }

  std::string name() const override { return "Qwen2VLImageProcessor"; }

  ProcessedImage process(const RgbImage& input) const override {
    const int64_t factor = patch_ * merge_;
    RgbImage img = input;
    if (resize_) {
      const auto [h, w] =
          qwen2vl_smart_resize(img.height, img.width, factor, min_pixels_, max_pixels_);
      img = resize(img, int(w), int(h), resample_);
    } else if (img.height % factor || img.width % factor) {
      raise<InvalidArgument>("image of {}x{}: not a multiple of {} and do_resize is off", img.width,
                             img.height, factor);
    }
    const Tensor planes = to_pixel_values(img, norm_);  // [3, H, W]
    const int64_t gh = img.height / patch_, gw = img.width / patch_;
    const int64_t row = 3 * temporal_ * patch_ * patch_;
    Tensor out = Tensor::empty({gh * gw, row}, DType::kF32);
    const float* src = planes.data<float>();
    float* dst = out.data<float>();
    const int64_t H = img.height, W = img.width, P = patch_, M = merge_;
    // Rows in (block row, block column, row in block, column in block) order; each row
    // (channel, time, y, x), the one frame repeated temporal_patch_size times.
    int64_t r = 0;
    for (int64_t by = 0; by < gh / M; ++by)
      for (int64_t bx = 0; bx < gw / M; ++bx)
        for (int64_t my = 0; my < M; ++my)
          for (int64_t mx = 0; mx < M; ++mx, ++r) {
            float* o = dst + r * row;
            const int64_t y0 = (by * M + my) * P, x0 = (bx * M + mx) * P;
            for (int64_t c = 0; c < 3; ++c)
              for (int64_t t = 0; t < temporal_; ++t)
                for (int64_t py = 0; py < P; ++py, o += P)
                  std::memcpy(o, src + (c * H + y0 + py) * W + x0, size_t(P) * sizeof(float));
          }
    return ProcessedImage{out, {1, gh, gw}};
  }

 private:
  bool resize_ = true;
  Resample resample_ = Resample::kBicubic;
  Normalization norm_;
  int64_t patch_ = 14, temporal_ = 2, merge_ = 2;
  int64_t min_pixels_ = 56 * 56, max_pixels_ = 28 * 28 * 1280;
};

}  // namespace

std::unique_ptr<ImageProcessor> make_qwen2vl_processor(const Json& c) {
  return std::make_unique<Qwen2VlProcessor>(c);
}

}  // namespace detail
}  // namespace tachyon::media
