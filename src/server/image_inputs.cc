#include "server/image_inputs.h"

#include <cctype>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace tachyon::server {
namespace {

bool has_scheme(const std::string& url, std::string_view scheme) {
  if (url.size() < scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(url[i])) != scheme[i]) return false;
  return true;
}

void check_url(const std::string& url, const std::string& where, bool allow_path) {
  if (url.empty()) throw ApiError::bad_request(where + " is empty", where);
  if (has_scheme(url, "data:") || has_scheme(url, "http://") || has_scheme(url, "https://") ||
      has_scheme(url, "file:"))
    return;
  if (allow_path && url.find("://") == std::string::npos) return;
  throw ApiError::bad_request(
      where + " must be a data:, http(s):// or file:// URL" + (allow_path ? " or a path" : ""),
      where);
}

std::vector<RequestImage> image_list(const Json& v, const std::string& where) {
  if (!v.is_array()) throw ApiError::bad_request(where + " must be a list of image URLs", where);
  std::vector<RequestImage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!v[i].is_string()) throw ApiError::bad_request(w + " must be a string", w);
    RequestImage in;
    in.url = v[i].get<std::string>();
    in.field = w;
    check_url(in.url, w, true);
    out.push_back(std::move(in));
  }
  return out;
}

}  // namespace

RequestImage parse_image_url(const Json& v, const std::string& where) {
  RequestImage in;
  if (v.is_string()) {
    in.url = v.get<std::string>();
    check_url(in.url, where, false);
    return in;
  }
  if (!v.is_object()) throw ApiError::bad_request(where + " must be an object with a url", where);
  FieldReader r(v, where);
  auto url = r.opt_string("url", SIZE_MAX);
  if (!url) throw ApiError::bad_request(where + ".url is required", where + ".url");
  in.url = *url;
  check_url(in.url, where + ".url", false);
  if (auto d = r.opt_string("detail", 16)) {
    if (*d != "auto" && *d != "low" && *d != "high")
      throw ApiError::bad_request(where + ".detail must be auto, low or high", where + ".detail");
    in.detail = *d;
  }
  r.finish();
  return in;
}

std::vector<std::vector<RequestImage>> parse_native_images(const Json& v, size_t num_prompts,
                                                           bool batch) {
  if (!v.is_array()) throw ApiError::bad_request("images must be a list", "images");
  const bool nested = !v.empty() && v[0].is_array();
  if (!nested) {
    if (batch && !v.empty())
      throw ApiError::bad_request("images: with prompt_batch give one list of images per prompt",
                                  "images");
    return std::vector<std::vector<RequestImage>>(num_prompts, image_list(v, "images"));
  }
  if (v.size() != num_prompts)
    throw ApiError::bad_request("images holds " + std::to_string(v.size()) + " lists for " +
                                    std::to_string(num_prompts) + " prompts",
                                "images");
  std::vector<std::vector<RequestImage>> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(image_list(v[i], "images[" + std::to_string(i) + "]"));
  return out;
}

void require_image_support(const ModelInfo& info, const std::vector<RequestImage>& images,
                           const std::string& field) {
  if (images.empty() || info.takes_images) return;
  throw ApiError::bad_request("this model takes no images", field);
}

void load_images(std::vector<RequestImage>& images, const media::MediaOptions& options,
                 bool allow_paths, const std::string& field) {
  for (size_t i = 0; i < images.size(); ++i) {
    if (images[i].image) continue;
    try {
      images[i].image = std::make_shared<const media::RgbImage>(
          media::load_image(images[i].url, options, allow_paths));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInternal) throw;
      const std::string where =
          images[i].field.empty() ? field + "[" + std::to_string(i) + "]" : images[i].field;
      throw ApiError::bad_request(where + ": " + e.what(), where);
    }
  }
}

}  // namespace tachyon::server
