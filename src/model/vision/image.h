// Images in prompts: an image as the model side takes it (its pixel_values and their
// hash), and the prompt's image tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace tachyon {

// A 128-bit hash of an image's pixel_values (its shape and values): the key of the
// model's embedding cache and what the prefix cache's salt takes from the image.
struct ImageHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const ImageHash&) const = default;
};

// One image of a request: the processor's pixel_values for it (f32 [channels, height,
// width] on the host, not changed after this is made) and their hash.
struct ImageInput {
  Tensor pixel_values;
  ImageHash hash;
};

ImageHash hash_pixel_values(const Tensor& pixel_values);

// An image from its pixel_values (f32 on the host, 3-d; InvalidArgument otherwise): the
// tensor is kept as it is and hashed.
std::shared_ptr<const ImageInput> make_image_input(Tensor pixel_values);

// A prompt's ids with every image placeholder (one image_token_id per image, as a
// tokenizer gives "<image>") repeated tokens_per_image times: the prompt the engine
// takes with num_images images. InvalidArgument when the prompt holds other than
// num_images placeholders.
std::vector<int32_t> expand_image_tokens(std::span<const int32_t> ids, size_t num_images,
                                         int32_t image_token_id, int32_t tokens_per_image);

}  // namespace tachyon
