// transformers' image processors, in their PIL-based form: from an RGB image to the
// vision tower's pixel values, read from the model's preprocessor_config.json (or the
// "image_processor" object of processor_config.json, where newer layouts put it).
//
//   CLIPImageProcessor (LLaVA-1.5): [pad to square,] resize the shortest edge, center
//     crop, rescale, normalize -> pixel_values [3, H, W].
//   Qwen2VLImageProcessor: smart_resize to multiples of patch_size * merge_size within
//     [min_pixels, max_pixels], resize, rescale, normalize, then the patches in
//     Qwen2-VL's order -> pixel_values [t * h * w, 3 * temporal_patch_size * P * P] and
//     grid_thw {t, h, w} (in patches).
//   LlavaNextImageProcessor: anyres tiling (the best grid resolution of
//     image_grid_pinpoints, tiles of crop_size after the whole image resized to a
//     square), each view through the CLIP steps -> pixel_values [views, 3, H, W] and
//     image_size {h, w}.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/tensor.h"
#include "media/image.h"

namespace tachyon::media {

struct ProcessedImage {
  Tensor pixel_values;                  // F32
  std::array<int64_t, 3> grid_thw{};    // Qwen2-VL's grid (in patches); zeros otherwise
  std::array<int64_t, 2> image_size{};  // LLaVA-NeXT's image_sizes entry {h, w}; else zeros
};

class ImageProcessor {
 public:
  virtual ~ImageProcessor() = default;
  // The processor's class name as configs spell it ("CLIPImageProcessor"...).
  virtual std::string name() const = 0;
  virtual ProcessedImage process(const RgbImage& image) const = 0;
};

// The processor a config object describes (its "image_processor_type", or
// `default_type` when it names none). Throws InvalidArgument for an unknown type or a
// bad field, naming it.
std::unique_ptr<ImageProcessor> make_image_processor(const Json& config,
                                                     const std::string& default_type = "");

// LLaVA-NeXT's select_best_resolution: the pinpoint {h, w} that keeps the most of the
// image (then wastes the least), first in the list on ties.
std::pair<int64_t, int64_t> llava_next_best_resolution(
    int64_t height, int64_t width, const std::vector<std::pair<int64_t, int64_t>>& pinpoints);

// The processor of a model directory: preprocessor_config.json, else
// processor_config.json's "image_processor". Throws NotFound when neither exists.
std::unique_ptr<ImageProcessor> load_image_processor(const std::filesystem::path& model_dir);

}  // namespace tachyon::media
