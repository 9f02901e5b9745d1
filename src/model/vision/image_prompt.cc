#include "model/vision/image_prompt.h"

#include "core/error.h"

namespace tachyon {

ImagePrompt image_prompt(const LanguageModel& model, std::span<const int32_t> ids,
                         std::vector<Tensor> pixel_values) {
  if (model.image_tokens() <= 0)
    raise<InvalidArgument>("this model has no vision tower: it takes no images");
  ImagePrompt p;
  for (size_t i = 0; i < pixel_values.size(); ++i) {
    try {
      p.images.push_back(make_image_input(std::move(pixel_values[i])));
      model.check_image(*p.images.back());
    } catch (const InvalidArgument& e) {
      raise<InvalidArgument>("image {}: {}", i, e.what());
    }
  }
  p.ids = expand_image_tokens(ids, p.images.size(), model.image_token_id(), model.image_tokens());
  return p;
}

}  // namespace tachyon
