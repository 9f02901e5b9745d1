// A LLaVA checkpoint's image side: the CLIP vision tower's and the projector's tensors,
// read in any of the layouts found (llava-hf: vision_tower.vision_model.* and
// multi_modal_projector.*; transformers 5: model.vision_tower.vision_model.* and
// model.multi_modal_projector.*; either without vision_model.), in host memory.
#pragma once

#include <vector>

#include "backend/ops.h"
#include "core/tensor.h"
#include "model/vision/vision_config.h"

namespace tachyon {

class Checkpoint;

struct ClipLayerWeights {
  NormParams norm1, norm2;  // LayerNorm, f32 weight and bias
  LinearWeights qkv;        // [3 D, D] rows q, k, v; bias [3 D] f32
  LinearWeights o, fc1, fc2;
};

struct VisionWeights {
  // The patch embedding as one product over a row per token: [D, K] f32, columns
  // [0, C p p) the convolution's weight flattened (channel, row, column), column C p p
  // the class embedding (read by the class token's row, a one there), the rest zero (K
  // rounded up to a multiple of 8).
  Tensor patch;
  Tensor positions;  // [num_positions, D]
  NormParams pre_norm;
  std::vector<ClipLayerWeights> layers;  // the layers that run (VisionModelConfig::layers_to_run)
  LinearWeights proj1, proj2;            // linear_1, linear_2 (absent for a linear projector)
};

// The patch matrix's width (VisionWeights::patch).
int64_t patch_matrix_cols(const ClipVisionConfig& c);

// Reads the tensors of the layers that run. NotFound naming a missing tensor (and the
// layouts tried), InvalidArgument for a tensor of the wrong shape.
VisionWeights load_vision_weights(const Checkpoint& ckpt, const VisionModelConfig& cfg);

}  // namespace tachyon
