// The configuration of a LLaVA model's image side: the CLIP vision tower (transformers'
// CLIPVisionConfig), which of its hidden states feed the projector, and the projector.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "model/hf_config.h"

namespace tachyon {

// CLIP's vision transformer (CLIPVisionModel): patch embedding, class embedding, learned
// positions, pre_layrnorm, pre-norm encoder layers with biased q/k/v/o and an MLP.
struct ClipVisionConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int32_t num_layers = 12;
  int32_t num_heads = 12;
  int32_t image_size = 224;
  int32_t patch_size = 32;
  int32_t num_channels = 3;
  double layer_norm_eps = 1e-5;
  Activation act = Activation::kQuickGelu;

  int32_t head_dim() const { return static_cast<int32_t>(hidden_size / num_heads); }
  int32_t patches_per_side() const { return image_size / patch_size; }
  int32_t num_patches() const { return patches_per_side() * patches_per_side(); }
  // Tokens the tower computes per image: the class token, then the patches.
  int32_t num_positions() const { return num_patches() + 1; }
  // The patch embedding's input width: channels x patch x patch.
  int64_t patch_dim() const { return int64_t{num_channels} * patch_size * patch_size; }
};

// A LLaVA model's image side (LlavaConfig's vision fields).
struct VisionModelConfig {
  ClipVisionConfig clip;
  // The hidden states the projector reads, as indices into CLIP's hidden_states
  // (0: the embeddings after pre_layrnorm, l: the output of layer l), in the config's
  // order (several are concatenated along the features); vision_feature_layer, whose
  // negative values count from the end.
  std::vector<int32_t> feature_layers;
  // vision_feature_select_strategy "full" keeps the class token; "default" drops it.
  bool keep_class_token = false;
  // The projector: linear_1, the activation, linear_2 (mlp2x_gelu); or linear_1 alone.
  Activation projector_act = Activation::kGelu;
  bool projector_mlp = true;
  int32_t image_token_id = 0;  // image_token_index / image_token_id
  int64_t text_hidden = 0;     // the projector's output width: the text model's embeddings
  std::string text_family;     // the registry family of the text model

  // The image tokens one image stands for in a prompt.
  int32_t tokens_per_image() const { return clip.num_patches() + (keep_class_token ? 1 : 0); }
  // The projector's input width.
  int64_t feature_dim() const {
    return clip.hidden_size * static_cast<int64_t>(feature_layers.size());
  }
  // The encoder layers that must run: the deepest hidden state read.
  int32_t layers_to_run() const;
};

// CLIPVisionConfig from a vision_config object, with transformers' defaults for the
// fields it leaves out. InvalidArgument naming the field for a bad value (a model_type
// other than CLIP's, an image size that is no multiple of the patch size, a hidden size
// that the heads do not divide).
ClipVisionConfig read_clip_vision_config(const HfConfig& vision);

// The vision side of a LlavaForConditionalGeneration config.json (vision_config,
// vision_feature_layer, vision_feature_select_strategy, projector_hidden_act,
// image_token_index / image_token_id); text_hidden and text_family are left for the
// caller, which maps the text model.
VisionModelConfig read_llava_vision_config(const HfConfig& cfg);

// The text_config of a LLaVA config.json as a config of its own: llama when it names no
// model_type, with LlamaConfig's defaults for the fields a llama text_config leaves out
// (llava-hf's files keep only what differs), and the top level's dtype when it has none.
HfConfig llava_text_config(const HfConfig& cfg);

}  // namespace tachyon
