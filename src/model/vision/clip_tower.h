// LLaVA's image side on a Backend: the CLIP vision tower as transformers'
// CLIPVisionModel computes it, the feature selection (vision_feature_layer, the select
// strategy) and the multi-modal projector, from pixel_values to one embedding row per
// image token.
//
// Every image's tokens (the class token, then its patches in row-major order) form one
// sequence of the step: the patch embedding is a product over the patches flattened on
// the host (the class token's row reads the class embedding through a column of its
// own), the learned positions are added by an embedding gather, and each encoder layer
// is layer_norm1, q/k/v with biases, attention over the image's own tokens in both
// directions (the paged attention over a scratch KV cache, each image a sequence whose
// bidirectional prefix is all of it), out_proj, layer_norm2, fc1 with the activation, fc2.
// The selected hidden states go to the host in float32 (the class token dropped under
// the "default" strategy, several layers concatenated along the features) and come back
// for the projector. Layers past the deepest one read are not run. The scratch cache is
// in the backend's KV dtype, so a backend whose cache is fp8 or int8 rounds the tower's
// keys and values as it rounds the text model's.
#pragma once

#include <span>

#include "backend/ops.h"
#include "core/tensor.h"
#include "model/vision/clip_weights.h"
#include "model/vision/vision_config.h"

namespace tachyon {

class VisionTower {
 public:
  // Prepares the weights for `backend` (which must outlive the tower).
  VisionTower(VisionModelConfig cfg, VisionWeights weights, Backend& backend);

  const VisionModelConfig& config() const { return cfg_; }

  // Checks one image's pixel_values: f32 [num_channels, image_size, image_size] on the
  // host, every value finite. InvalidArgument naming what is wrong.
  void check_image(const Tensor& pixel_values) const;

  // The selected vision features of the images, f32 on the host
  // [images x tokens_per_image, feature_dim] (image after image).
  Tensor features(std::span<const Tensor> images);
  // The projector over features [rows, feature_dim] f32 (host): [rows, text_hidden] f32.
  Tensor project(const Tensor& features);
  // features() then project(): each image token's embedding.
  Tensor embed(std::span<const Tensor> images) { return project(features(images)); }

 private:
  // An activation-dtype device copy of host f32 rows.
  Tensor upload_rows(const Tensor& host);
  // A device tensor in f32 on the host (a copy).
  Tensor download_f32(const Tensor& t);

  VisionModelConfig cfg_;
  Backend& be_;
  VisionWeights w_;  // prepared for be_
};

}  // namespace tachyon
