// A request's images on their way into a model with a vision tower: each decoded image
// through the model's image processor (media/image_processor.h, read from the model
// folder at start) into pixel_values, then the prompt's image placeholders expanded and
// the images checked against the tower (as model/vision/image_prompt.h). The chat API,
// the native API and `tachyon generate --image` all go through it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frontend/backend.h"
#include "media/image_processor.h"
#include "model/config.h"
#include "model/vision/image_prompt.h"

namespace tachyon {

class ImagePreprocessor {
 public:
  // The preprocessor of the model `config` describes (read from `model_dir`; the
  // config alone, so a caller may ask before the weights load), or null for a model
  // without a vision tower. A vision model's folder must hold preprocessor_config.json
  // or processor_config.json (transformers' AutoProcessor refuses a folder without one
  // too): NotFound otherwise, InvalidArgument for a config the processors refuse.
  static std::unique_ptr<ImagePreprocessor> load(const std::string& model_dir,
                                                 const ModelConfig& config);

  // For `model` (the one loaded from that config): `ids` holds one image token
  // (model.image_token_id()) per image, where it goes; `images` are decoded, in prompt
  // order. Returns the expanded prompt and the images' inputs. InvalidArgument naming
  // the image's field for one the processor or the tower refuses, or naming `field` for
  // a count of placeholders other than the images'.
  ImagePrompt prepare(const LanguageModel& model, std::span<const int32_t> ids,
                      const std::vector<RequestImage>& images, const std::string& field) const;

  const media::ImageProcessor& processor() const { return *processor_; }

 private:
  ImagePreprocessor() = default;

  std::unique_ptr<media::ImageProcessor> processor_;
};

// The number of image placeholders (`image_token_id`) in `ids`.
size_t count_image_tokens(std::span<const int32_t> ids, int32_t image_token_id);

}  // namespace tachyon
