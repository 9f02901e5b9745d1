#include "model/vision/vision_config.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

int32_t VisionModelConfig::layers_to_run() const {
  int32_t deepest = 0;
  for (int32_t l : feature_layers) deepest = std::max(deepest, l);
  return deepest;
}

ClipVisionConfig read_clip_vision_config(const HfConfig& v) {
  const std::string src = v.source();
  if (auto type = v.get_string({"model_type"}); type && *type != "clip_vision_model")
    raise<InvalidArgument>(
        "{}: vision_config.model_type '{}' is not supported (the vision tower must be "
        "clip_vision_model)",
        src, *type);
  ClipVisionConfig c;
  c.hidden_size = v.size_or({"hidden_size"}, c.hidden_size);
  c.intermediate_size = v.size_or({"intermediate_size"}, c.intermediate_size);
  c.num_layers = to_i32(v.size_or({"num_hidden_layers"}, c.num_layers), "num_hidden_layers");
  c.num_heads = to_i32(v.size_or({"num_attention_heads"}, c.num_heads), "num_attention_heads");
  c.image_size = to_i32(v.size_or({"image_size"}, c.image_size), "image_size");
  c.patch_size = to_i32(v.size_or({"patch_size"}, c.patch_size), "patch_size");
  c.num_channels = to_i32(v.size_or({"num_channels"}, c.num_channels), "num_channels");
  c.layer_norm_eps = v.double_or({"layer_norm_eps"}, c.layer_norm_eps);
  if (!(c.layer_norm_eps > 0))
    raise<InvalidArgument>("{}: vision_config.layer_norm_eps must be > 0", src);
  c.act = parse_activation(v.get_string({"hidden_act"}).value_or("quick_gelu"), v,
                           "vision_config.hidden_act");
  if (c.hidden_size % c.num_heads != 0)
    raise<InvalidArgument>("{}: vision_config.hidden_size {} is not a multiple of {} heads", src,
                           c.hidden_size, c.num_heads);
  if (c.image_size % c.patch_size != 0)
    raise<InvalidArgument>("{}: vision_config.image_size {} is not a multiple of patch_size {}",
                           src, c.image_size, c.patch_size);
  return c;
}

VisionModelConfig read_llava_vision_config(const HfConfig& cfg) {
  const std::string src = cfg.source();
  VisionModelConfig vm;
  const Json* vc = cfg.find({"vision_config"});
  if (vc == nullptr || !vc->is_object())
    raise<InvalidArgument>("{}: a LLaVA config needs a vision_config object", src);
  vm.clip = read_clip_vision_config(cfg.sub("vision_config"));

  // vision_feature_layer: an index into hidden_states (num_layers + 1 of them), or a list.
  const int32_t states = vm.clip.num_layers + 1;
  auto layer_index = [&](const Json& x) {
    if (!x.is_number_integer())
      raise<InvalidArgument>("{}: vision_feature_layer must hold integers, got {}", src, x.dump());
    const int64_t l = x.get<int64_t>();
    const int64_t i = l < 0 ? states + l : l;
    if (i < 0 || i >= states)
      raise<InvalidArgument>("{}: vision_feature_layer {} is outside the {} hidden states", src, l,
                             states);
    vm.feature_layers.push_back(static_cast<int32_t>(i));
  };
  if (const Json* fl = cfg.find({"vision_feature_layer"})) {
    if (fl->is_array()) {
      if (fl->empty()) raise<InvalidArgument>("{}: vision_feature_layer is an empty list", src);
      for (const Json& x : *fl) layer_index(x);
    } else {
      layer_index(*fl);
    }
  } else {
    layer_index(Json(-2));
  }

  const std::string strategy =
      cfg.get_string({"vision_feature_select_strategy"}).value_or("default");
  if (strategy != "default" && strategy != "full")
    raise<InvalidArgument>(
        "{}: vision_feature_select_strategy '{}' is not one of \"default\", \"full\"", src,
        strategy);
  vm.keep_class_token = strategy == "full";

  vm.projector_act = parse_activation(cfg.get_string({"projector_hidden_act"}).value_or("gelu"),
                                      cfg, "projector_hidden_act");
  if (auto t = cfg.get_string({"mm_projector_type"}); t && *t != "mlp2x_gelu" && *t != "linear")
    raise<InvalidArgument>("{}: mm_projector_type '{}' is not one of mlp2x_gelu, linear", src, *t);
  vm.projector_mlp = cfg.get_string({"mm_projector_type"}).value_or("mlp2x_gelu") != "linear";
  if (cfg.get_bool({"multimodal_projector_bias"}).value_or(true) == false)
    raise<InvalidArgument>("{}: multimodal_projector_bias false is not supported", src);
  const auto token = cfg.get_int({"image_token_id", "image_token_index"});
  vm.image_token_id = to_i32(token.value_or(32000), "image_token_index");
  if (vm.image_token_id < 0)
    raise<InvalidArgument>("{}: image_token_index {} is negative", src, vm.image_token_id);
  return vm;
}

HfConfig llava_text_config(const HfConfig& cfg) {
  const Json* tc = cfg.find({"text_config"});
  if (tc != nullptr && !tc->is_object())
    raise<InvalidArgument>("{}: text_config must be an object", cfg.source());
  Json text = tc != nullptr ? *tc : Json::object();
  if (!text.contains("model_type") || text["model_type"].is_null()) text["model_type"] = "llama";
  if (text["model_type"] == "llama") {
    // LlamaConfig's defaults: llava-hf's text_config keeps only what differs from them.
    const Json defaults = {{"vocab_size", 32000},        {"hidden_size", 4096},
                           {"intermediate_size", 11008}, {"num_hidden_layers", 32},
                           {"num_attention_heads", 32},  {"max_position_embeddings", 2048},
                           {"rms_norm_eps", 1e-6},       {"hidden_act", "silu"},
                           {"rope_theta", 10000.0},      {"tie_word_embeddings", false}};
    for (auto it = defaults.begin(); it != defaults.end(); ++it)
      if (!text.contains(it.key()) || text[it.key()].is_null()) text[it.key()] = it.value();
  }
  for (const char* k : {"torch_dtype", "dtype"})
    if (cfg.has({k}) && !text.contains(k)) text[k] = cfg.json().at(k);
  return HfConfig(std::move(text), cfg.source() + " (text_config)");
}

}  // namespace tachyon
