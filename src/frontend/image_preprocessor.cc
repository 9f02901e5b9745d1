#include "frontend/image_preprocessor.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

std::unique_ptr<ImagePreprocessor> ImagePreprocessor::load(const std::string& model_dir,
                                                           const ModelConfig& config) {
  if (!config.vision) return nullptr;
  std::unique_ptr<ImagePreprocessor> p(new ImagePreprocessor());
  try {
    p->processor_ = media::load_image_processor(model_dir);
  } catch (const NotFound&) {
    raise<NotFound>(
        "{} is a vision model but has no preprocessor_config.json or processor_config.json: "
        "its image processor cannot be known",
        model_dir);
  } catch (const InvalidArgument& e) {
    raise<InvalidArgument>("{}: {}", model_dir, e.what());
  }
  return p;
}

size_t count_image_tokens(std::span<const int32_t> ids, int32_t image_token_id) {
  return static_cast<size_t>(std::count(ids.begin(), ids.end(), image_token_id));
}

ImagePrompt ImagePreprocessor::prepare(const LanguageModel& model, std::span<const int32_t> ids,
                                       const std::vector<RequestImage>& images,
                                       const std::string& field) const {
  const size_t tags = count_image_tokens(ids, model.image_token_id());
  if (tags != images.size())
    raise<InvalidArgument>(
        "{}: the prompt holds {} image placeholder{} (<image>) but {} image{} given", field, tags,
        tags == 1 ? "" : "s", images.size(), images.size() == 1 ? " is" : "s are");
  std::vector<Tensor> pixel_values;
  pixel_values.reserve(images.size());
  for (const RequestImage& image : images) {
    if (!image.image)
      raise<InvalidArgument>("{}: the image was not decoded", image.field);  // a caller's slip
    try {
      pixel_values.push_back(processor_->process(*image.image).pixel_values);
      model.check_image(*make_image_input(pixel_values.back()));
    } catch (const InvalidArgument& e) {
      raise<InvalidArgument>("{}: {}", image.field, e.what());
    }
  }
  return image_prompt(model, ids, std::move(pixel_values));
}

}  // namespace tachyon
