// Weight slots and the weight mapping: which checkpoint tensor fills each framework
// slot, and the transform it needs. Matrices stay in their checkpoint dtype; a slot
// with no transform is a zero-copy view of the memory-mapped file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/tensor.h"
#include "model/config.h"

namespace tachyon {

class Checkpoint;

enum class Slot : uint8_t {
  // Global.
  kEmbedding,     // [V, E]
  kPosEmbedding,  // [P, D] learned positions
  kEmbedNorm,     // [D] (+ bias)
  kEmbedNormBias,
  kProjectIn,   // [D, E] (OPT word_embed_proj_dim)
  kProjectOut,  // [E, D]
  kFinalNorm,
  kFinalNormBias,
  kLmHead,      // [V, E]
  kLmHeadBias,  // [V]
  // Per layer ("{L}" in the name).
  kAttnNorm,
  kAttnNormBias,
  kMlpNorm,
  kMlpNormBias,
  kPostAttnNorm,  // sandwich norms
  kPostMlpNorm,
  kQNorm,  // [hd]
  kKNorm,
  kQkv,  // [(H + 2 KV) hd, D] fused, rows [q; k; v] after the transform
  kQkvBias,
  kQ,
  kQBias,
  kK,
  kKBias,
  kV,
  kVBias,
  kO,  // [D, H hd]
  kOBias,
  kGateUp,  // [2 I, D] fused, rows [gate; up]
  kGate,    // [I, D]
  kGateBias,
  kUp,  // [I, D] (the first MLP matrix of a non-gated MLP)
  kUpBias,
  kDown,  // [D, I]
  kDownBias,
  kRouter,      // [E, D]
  kExpertGate,  // per expert ("{E}" in the name): [Ie, D]
  kExpertUp,
  kExpertGateUp,   // [2 Ie, D]
  kExpertDown,     // [D, Ie]
  kExpertsGateUp,  // all experts stacked [E, 2 Ie, D] (transformers 5 layout)
  kExpertsDown,    // all experts stacked [E, D, Ie]
  kSharedGate,     // shared expert [Is, D]
  kSharedUp,
  kSharedDown,
  kSharedExpertGate,  // [1, D]
  // A block replaced by a linear map of its normed input (ModelConfig::layer_linear_*).
  kLinearAttn,  // [D, D]
  kLinearMlp,   // [D, D]
  kCount,
};

std::string_view slot_name(Slot slot);

enum class WeightTransform : uint8_t {
  kNone,
  kTranspose,   // stored [in, out] (GPT-2 Conv1D)
  kQkvPerHead,  // rows [head][q, k, v][hd] (Bloom, GPT-NeoX, old Falcon)
  kQkvGrouped,  // rows [kv head][q x group, k, v][hd] (Falcon new decoder)
  // Each row scaled to unit L2 norm (Baichuan2's NormHead lm_head).
  kNormalizeRows,
};

struct WeightRef {
  std::string name;  // "{L}" = layer index, "{E}" = expert index
  WeightTransform transform = WeightTransform::kNone;
  bool optional = false;                       // a missing tensor leaves the slot empty
  std::vector<std::string> alternatives = {};  // other spellings, tried in order
};

// An architecture's weight mapping: slot -> tensor name (+ transform).
using WeightMap = std::map<Slot, WeightRef>;

struct LayerWeights {
  NormParams attn_norm, mlp_norm, post_attn_norm, post_mlp_norm, q_norm, k_norm;
  LinearWeights qkv, q, k, v, o;
  LinearWeights gate_up, gate, up, down;
  LinearWeights router;
  std::vector<MoeExpertWeights> experts;
  LinearWeights shared_gate, shared_up, shared_down, shared_expert_gate;
  LinearWeights linear_attn, linear_mlp;  // blocks replaced by a linear map
};

// Where each loaded tensor came from (for `tachyon inspect`).
struct WeightRecord {
  std::string slot;  // "layers.3.attn_qkv" / "embedding"
  std::string tensor;
  DType dtype = DType::kF32;
  Shape shape;  // as stored in the checkpoint (a quantized module: its logical [n, k])
  std::string transform;
  // How the weight is stored: its dtype ("bf16"), or a quantized module's form
  // ("int4 g128 sym", "fp8 block 128x128"); for a quantized module `tensor` is the
  // module's name and `dtype` the typed view's (u8 / f8_e4m3).
  std::string storage;
  uint64_t bytes = 0;
};

struct ModelWeights {
  Tensor embedding;
  Tensor pos_embedding;
  NormParams embed_norm, final_norm;
  LinearWeights project_in, project_out, lm_head;
  std::vector<LayerWeights> layers;
  std::vector<WeightRecord> records;
  WeightMap map;              // the mapping the weights were loaded with (LoRA adapters read it)
  bool tied_lm_head = false;  // the lm_head is the embedding table (set when prepared)
  uint64_t total_params = 0;
  uint64_t total_bytes = 0;
};

// Loads every slot of `map` from the checkpoint, checks each tensor's shape against
// the config, applies the transforms and builds the per-layer weights. A missing
// required tensor -> NotFound naming it; a wrong shape or dtype -> InvalidArgument.
// A missing lm_head falls back to the embedding (tied).
ModelWeights load_weights(const Checkpoint& ckpt, const ModelConfig& cfg, const WeightMap& map);

// The shape a slot has in the decoder's layout (before any stored transpose).
// Learned positions: [max_seq_len + offset, D] is the minimum.
Shape slot_shape(const ModelConfig& cfg, Slot slot, int layer = -1);
// Whether layer `layer` has the block a per-layer slot belongs to (the attention's
// norms and products, or the MLP's): false for a pruned layer's absent block.
bool slot_present(const ModelConfig& cfg, Slot slot, int layer);

// The transforms, exposed for tests. Each returns a new tensor in the same dtype.
Tensor transpose_2d(const Tensor& t);
Tensor reorder_qkv_per_head(const Tensor& t, int32_t heads, int32_t head_dim);
Tensor reorder_qkv_grouped(const Tensor& t, int32_t kv_heads, int32_t group, int32_t head_dim);
// Each row divided by max(its L2 norm, 1e-12) (torch.nn.functional.normalize), computed
// in float64 and rounded back to the tensor's dtype.
Tensor normalize_rows(const Tensor& t);

}  // namespace tachyon
