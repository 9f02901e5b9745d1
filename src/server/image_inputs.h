// Images in requests: OpenAI chat content parts {"type": "image_url", "image_url":
// {"url": ..., "detail": ...}} and the native API's top-level "images" (URLs, data
// URLs or local paths). Parsing checks their form only; fetching and decoding
// (media/image_source.h) happen later, on the work pool, and only for a model that
// takes images.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "frontend/backend.h"
#include "media/image_source.h"

namespace tachyon::server {

// One image_url content part's image_url value (an object with url and detail, or the
// URL as a string); 400 naming `where` for a bad one.
RequestImage parse_image_url(const Json& v, const std::string& where);

// The native API's images: a list of strings (one prompt) or, for prompt_batch, a list
// of such lists, one per prompt. Returns one list per prompt.
std::vector<std::vector<RequestImage>> parse_native_images(const Json& v, size_t num_prompts,
                                                           bool batch);

// 400 "this model takes no images" unless the model reads images or there are none.
void require_image_support(const ModelInfo& info, const std::vector<RequestImage>& images,
                           const std::string& field);

// Fetches and decodes every image (skipping those already decoded); 400 naming
// field[i] and the problem for one that cannot be read.
void load_images(std::vector<RequestImage>& images, const media::MediaOptions& options,
                 bool allow_paths, const std::string& field);

}  // namespace tachyon::server
