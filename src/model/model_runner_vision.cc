// ModelRunner's images: the vision tower and the embeddings cache (model/vision).
#include "core/error.h"
#include "model/model_runner.h"

namespace tachyon {

void ModelRunner::attach_vision(VisionWeights weights) {
  TACHYON_CHECK(cfg_.vision != nullptr, "attach_vision: the model's config has no vision side");
  images_ = std::make_unique<ImageEncoder>(
      std::make_unique<VisionTower>(*cfg_.vision, std::move(weights), *be_));
}

int32_t ModelRunner::image_token_id() const {
  return images_ ? images_->tower().config().image_token_id : -1;
}

int32_t ModelRunner::image_tokens() const {
  return images_ ? images_->tower().config().tokens_per_image() : 0;
}

void ModelRunner::check_image(const ImageInput& image) const {
  if (!images_) raise<InvalidArgument>("this model has no vision tower: it takes no images");
  images_->tower().check_image(image.pixel_values);
}

Tensor ModelRunner::image_embeddings(const ImageInput& image) {
  check_image(image);
  return images_->embeddings(image);
}

}  // namespace tachyon
