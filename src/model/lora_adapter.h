// LoRA adapters in PEFT's format, read for one model: adapter_config.json and
// adapter_model.safetensors (or adapter_model.bin through the restricted unpickler).
// Each adapted module becomes a LoraModule in the decoder's layout: the weight slot it
// adapts (found through the architecture's weight mapping, so any architecture's module
// names work), A [r, K] and B [N, r] in f32 with the adapter's scaling folded into B and
// the slot's row transform (merged q/k/v reordered per head) applied to B.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/weights.h"

namespace tachyon {

struct LoraModule {
  int32_t layer = 0;
  // kQ, kK, kV, kQkv, kO, kGate, kUp, kGateUp or kDown (kUp also as a non-gated MLP's
  // first matrix).
  Slot slot = Slot::kQ;
  std::string name;  // the module's name in the checkpoint ("model.layers.0.self_attn.q_proj")
  Tensor a;          // [r, K] f32
  Tensor b;          // [N, r] f32, times the module's scaling (alpha / r, or / sqrt(r))
  // The module's first row in the layer's stacked matrix: a kK / kV module's rows in
  // [q; k; v] (q_size, q_size + kv_size), a gated kUp's in [gate; up] (inter); else 0.
  int64_t stacked_row = 0;
  int32_t rank() const { return a ? static_cast<int32_t>(a.dim(0)) : 0; }
};

struct LoraAdapter {
  std::string path;                 // the folder it was read from
  int32_t max_rank = 0;             // the largest rank of its modules
  std::vector<LoraModule> modules;  // sorted by (layer, slot)
  uint64_t bytes = 0;               // of A and B as stored in the adapter's files
};

struct LoraLimits {
  int32_t max_rank = 0;  // > 0: a module of a larger rank is refused
};

// Reads the PEFT adapter folder `dir` for a model of config `cfg` whose checkpoint the
// weight mapping `map` reads. Throws InvalidArgument (or NotFound for missing files)
// naming the problem, at load time, for anything the decoder would not compute exactly:
// a peft_type other than LORA, DoRA, modules_to_save, trainable biases, embedding, lm_head,
// router or MoE expert targets, a module that matches no weight slot, shapes that do not
// fit the model, layer_replication, a rank past limits.max_rank.
//
// A module's name (the tensor key less "base_model.model." and ".lora_A[.<adapter>].weight")
// is a slot's WeightRef name (or alternative) with "{L}" a layer index and ".weight"
// dropped, also without its first component (an adapter trained on the bare base model).
// Every module in the file must be one adapter_config.json targets (target_modules,
// exclude_modules, layers_to_transform as PEFT matches them; no target_modules: any), of
// the rank its r / rank_pattern gives. fan_in_fan_out is accepted: PEFT stores A and B
// nn.Linear-shaped for Conv1D layers too.
LoraAdapter load_lora_adapter(const std::string& dir, const ModelConfig& cfg, const WeightMap& map,
                              const LoraLimits& limits);

// Folds an adapter into the model's weights (static LoRA, RTP-LLM's one-adapter
// LORA_INFO): W += B · A for every module, each merged matrix a new tensor in the
// weight's dtype (f32, f16 or bf16; the sum computed in f32). Throws InvalidArgument
// for a quantized weight.
void merge_lora(ModelWeights& weights, const LoraAdapter& adapter);

}  // namespace tachyon
