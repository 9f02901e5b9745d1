// A prompt with images, ready for a model that has a vision tower: what a frontend (the
// chat API, `tachyon generate --image`) hands the engine once its processor has turned
// each image into pixel_values.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/forward.h"
#include "model/vision/image.h"

namespace tachyon {

struct ImagePrompt {
  std::vector<int32_t> ids;  // every image placeholder expanded (expand_image_tokens)
  std::vector<std::shared_ptr<const ImageInput>> images;  // in prompt order
};

// `ids` holds one image token (model.image_token_id()) per image, where the image goes;
// pixel_values: each image's f32 [channels, height, width] on the host, in prompt order.
// InvalidArgument for a model without a vision tower, pixel_values the tower does not
// take, or a count of placeholders other than the images'.
ImagePrompt image_prompt(const LanguageModel& model, std::span<const int32_t> ids,
                         std::vector<Tensor> pixel_values);

}  // namespace tachyon
