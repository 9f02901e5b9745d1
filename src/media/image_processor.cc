#include "media/image_processor.h"

#include <cmath>

#include "core/error.h"
#include "media/processor_config.h"

namespace tachyon::media {
namespace detail {

namespace {
const Json* field(const Json& c, const char* key) {
  auto it = c.find(key);
  return it == c.end() || it->is_null() ? nullptr : &*it;
}
}  // namespace

bool config_bool(const Json& c, const char* key, bool def) {
  const Json* v = field(c, key);
  if (!v) return def;
  if (!v->is_boolean())
    raise<InvalidArgument>("image processor config: {} must be true or false", key);
  return v->get<bool>();
}

double config_number(const Json& c, const char* key, double def) {
  const Json* v = field(c, key);
  if (!v) return def;
  if (!v->is_number()) raise<InvalidArgument>("image processor config: {} must be a number", key);
  const double d = v->get<double>();
  if (!std::isfinite(d)) raise<InvalidArgument>("image processor config: {} must be finite", key);
  return d;
}

int64_t config_int(const Json& c, const char* key, int64_t def, int64_t lo, int64_t hi) {
  const Json* v = field(c, key);
  if (!v) return def;
  if (!v->is_number_integer())
    raise<InvalidArgument>("image processor config: {} must be an integer", key);
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi)
    raise<InvalidArgument>("image processor config: {} = {} is outside [{}, {}]", key, i, lo, hi);
  return i;
}

std::array<float, 3> config_triple(const Json& c, const char* key, std::array<float, 3> def) {
  const Json* v = field(c, key);
  if (!v) return def;
  if (v->is_number()) {
    const float f = v->get<float>();
    return {f, f, f};
  }
  if (!v->is_array() || v->size() != 3)
    raise<InvalidArgument>("image processor config: {} must be a number or 3 numbers", key);
  std::array<float, 3> out{};
  for (int i = 0; i < 3; ++i) {
    if (!(*v)[i].is_number())
      raise<InvalidArgument>("image processor config: {} must be a number or 3 numbers", key);
    out[i] = (*v)[i].get<float>();
  }
  return out;
}

Normalization config_normalization(const Json& c) {
  Normalization n;
  n.rescale = config_bool(c, "do_rescale", true);
  n.rescale_factor = config_number(c, "rescale_factor", 1.0 / 255.0);
  n.normalize = config_bool(c, "do_normalize", true);
  n.mean = config_triple(c, "image_mean", n.mean);
  n.std = config_triple(c, "image_std", n.std);
  for (float s : n.std)
    if (!(s != 0.0f) || !std::isfinite(s))
      raise<InvalidArgument>("image processor config: image_std must be nonzero and finite");
  return n;
}

Resample config_resample(const Json& c) {
  return resample_from_pil(int(config_int(c, "resample", 3, -1000, 1000)));
}

}  // namespace detail

std::unique_ptr<ImageProcessor> make_image_processor(const Json& config,
                                                     const std::string& default_type) {
  if (!config.is_object()) raise<InvalidArgument>("image processor config: not a JSON object");
  std::string type = default_type;
  if (auto it = config.find("image_processor_type"); it != config.end() && it->is_string())
    type = it->get<std::string>();
  // One class per processor, whatever its backend: the "Fast" classes (transformers 4)
  // and the plain names (transformers 5) compute with torchvision, whose resize differs
  // from PIL's by one level in a few samples; the "Pil" classes (transformers 5) and
  // the plain names (transformers 4) are the PIL form, which this module reproduces.
  for (const std::string_view suffix : {"Fast", "Pil"})
    if (type.size() > suffix.size() && type.ends_with(suffix))
      type.resize(type.size() - suffix.size());
  if (type == "CLIPImageProcessor") return detail::make_clip_processor(config, false);
  if (type == "LlavaImageProcessor")
    return detail::make_clip_processor(config, detail::config_bool(config, "do_pad", false));
  if (type == "Qwen2VLImageProcessor") return detail::make_qwen2vl_processor(config);
  if (type == "LlavaNextImageProcessor") return detail::make_llava_next_processor(config);
  if (type.empty()) raise<InvalidArgument>("image processor config: no image_processor_type");
  raise<InvalidArgument>(
      "image processor {} is not supported (CLIPImageProcessor, LlavaImageProcessor, "
      "LlavaNextImageProcessor and Qwen2VLImageProcessor are)",
      type);
}

std::unique_ptr<ImageProcessor> load_image_processor(const std::filesystem::path& model_dir) {
  const auto pre = model_dir / "preprocessor_config.json";
  if (std::filesystem::exists(pre)) return make_image_processor(load_json_file(pre.string()));
  const auto proc = model_dir / "processor_config.json";
  if (std::filesystem::exists(proc)) {
    const Json j = load_json_file(proc.string());
    if (auto it = j.find("image_processor"); it != j.end() && it->is_object())
      return make_image_processor(*it);
  }
  raise<NotFound>("{}: no image processor (preprocessor_config.json or processor_config.json)",
                  model_dir.string());
}

}  // namespace tachyon::media
