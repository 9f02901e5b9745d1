// CLIPImageProcessor (and LlavaImageProcessor, which adds padding to a square).
#include <fmt/format.h>

#include "core/error.h"
#include "media/processor_config.h"

namespace tachyon::media::detail {
namespace {

class ClipProcessor : public ImageProcessor {
 public:
  ClipProcessor(const Json& c, bool pad) : pad_(pad) {
    resize_ = config_bool(c, "do_resize", true);
    if (resize_) {
      auto it = c.find("size");
      if (it == c.end() || it->is_null()) {
        shortest_edge_ = 224;
      } else if (it->is_number_integer()) {
        shortest_edge_ = config_int(c, "size", 224, 1, 1 << 16);
      } else if (it->is_object() && it->contains("shortest_edge")) {
        shortest_edge_ = config_int(*it, "shortest_edge", 224, 1, 1 << 16);
      } else if (it->is_object() && it->contains("height") && it->contains("width")) {
        height_ = int(config_int(*it, "height", 224, 1, 1 << 16));
        width_ = int(config_int(*it, "width", 224, 1, 1 << 16));
      } else {
        raise<InvalidArgument>(
            "image processor config: size must be an integer, {{\"shortest_edge\": n}} or "
            "{{\"height\": h, \"width\": w}}");
      }
    }
    resample_ = config_resample(c);
    crop_ = config_bool(c, "do_center_crop", true);
    if (crop_) {
      auto it = c.find("crop_size");
      if (it == c.end() || it->is_null()) {
        crop_h_ = crop_w_ = 224;
      } else if (it->is_number_integer()) {
        crop_h_ = crop_w_ = int(config_int(c, "crop_size", 224, 1, 1 << 16));
      } else if (it->is_object()) {
        crop_h_ = int(config_int(*it, "height", 224, 1, 1 << 16));
        crop_w_ = int(config_int(*it, "width", 224, 1, 1 << 16));
      } else {
        raise<InvalidArgument>("image processor config: crop_size must be an integer or an object");
      }
    }
    norm_ = config_normalization(c);
  }

  std::string name() const override { return pad_ ? "LlavaImageProcessor" : "CLIPImageProcessor"; }

  ProcessedImage process(const RgbImage& input) const override {
    RgbImage img = pad_ ? pad_to_square(input, mean_background(norm_.mean)) : input;
    if (resize_) {
      int h = height_, w = width_;
      if (shortest_edge_ > 0) {
        // transformers' get_resize_output_image_size (default_to_square=False): the
        // short side to shortest_edge, the long one in proportion, truncated.
        const bool portrait = img.width <= img.height;
        const int64_t short_side = portrait ? img.width : img.height;
        const int64_t long_side = portrait ? img.height : img.width;
        const int64_t new_long = int64_t(double(shortest_edge_ * long_side) / double(short_side));
        if (new_long < 1 || new_long > (1 << 20))
          raise<InvalidArgument>(
              "image of {}x{}: resized to {} on the short side gives a long "
              "side of {} pixels",
              img.width, img.height, shortest_edge_, new_long);
        h = int(portrait ? new_long : shortest_edge_);
        w = int(portrait ? shortest_edge_ : new_long);
      }
      img = resize(img, w, h, resample_);
    }
    if (crop_) img = center_crop(img, crop_h_, crop_w_);
    return ProcessedImage{to_pixel_values(img, norm_), {}};
  }

 private:
  bool pad_;
  bool resize_ = true;
  int64_t shortest_edge_ = 0;  // 0: resize to height_ x width_
  int height_ = 0, width_ = 0;
  Resample resample_ = Resample::kBicubic;
  bool crop_ = true;
  int crop_h_ = 0, crop_w_ = 0;
  Normalization norm_;
};

}  // namespace

std::unique_ptr<ImageProcessor> make_clip_processor(const Json& c, bool pad_to_square) {
  return std::make_unique<ClipProcessor>(c, pad_to_square);
}

}  // namespace tachyon::media::detail
