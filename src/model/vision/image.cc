#include "model/vision/image.h"

#include <cstring>

#include "core/error.h"

namespace tachyon {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

ImageHash hash_pixel_values(const Tensor& px) {
  // Two chains over the shape, then the bytes in 8-byte words, with different seeds.
  uint64_t a = 0x6a09e667f3bcc908ull, b = 0xbb67ae8584caa73bull;
  auto add = [&](uint64_t w) {
    a = mix(a ^ w);
    b = mix(b + (w ^ 0xa54ff53a5f1d36f1ull));
  };
  add(static_cast<uint64_t>(px.ndim()));
  for (int i = 0; i < px.ndim(); ++i) add(static_cast<uint64_t>(px.dim(i)));
  const auto* bytes = static_cast<const unsigned char*>(px.raw());
  const size_t n = px.nbytes();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    add(w);
  }
  uint64_t tail = 0;
  if (n > i) std::memcpy(&tail, bytes + i, n - i);
  add(tail ^ (static_cast<uint64_t>(n) << 3));
  return ImageHash{a, b};
}

std::shared_ptr<const ImageInput> make_image_input(Tensor pixel_values) {
  if (!pixel_values || !pixel_values.device().is_cpu() || pixel_values.dtype() != DType::kF32 ||
      pixel_values.ndim() != 3)
    raise<InvalidArgument>(
        "image pixel_values {}: expected f32 [channels, height, width] on the host",
        pixel_values ? pixel_values.str() : std::string("(none)"));
  auto image = std::make_shared<ImageInput>();
  image->hash = hash_pixel_values(pixel_values);
  image->pixel_values = std::move(pixel_values);
  return image;
}

std::vector<int32_t> expand_image_tokens(std::span<const int32_t> ids, size_t num_images,
                                         int32_t image_token_id, int32_t tokens_per_image) {
  TACHYON_CHECK(tokens_per_image > 0, "expand_image_tokens: {} tokens per image", tokens_per_image);
  size_t found = 0;
  for (int32_t id : ids) found += id == image_token_id;
  if (found != num_images)
    raise<InvalidArgument>("the prompt holds {} image placeholder(s) (token {}) for {} image(s)",
                           found, image_token_id, num_images);
  std::vector<int32_t> out;
  out.reserve(ids.size() + found * static_cast<size_t>(tokens_per_image - 1));
  for (int32_t id : ids) {
    if (id == image_token_id)
      out.insert(out.end(), static_cast<size_t>(tokens_per_image), id);
    else
      out.push_back(id);
  }
  return out;
}

}  // namespace tachyon
