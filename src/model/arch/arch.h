// One ArchSpec per family (src/model/arch/<family>.cc); registry.cc lists them.
#pragma once

#include "model/registry.h"

namespace tachyon::arch {

ArchSpec llama_spec();
ArchSpec mistral_spec();
ArchSpec mixtral_spec();
ArchSpec qwen2_spec();
ArchSpec qwen2_moe_spec();
ArchSpec qwen3_spec();
ArchSpec gemma_spec();
ArchSpec gemma2_spec();
ArchSpec phi_spec();
ArchSpec phi3_spec();
ArchSpec falcon_spec();
ArchSpec bloom_spec();
ArchSpec mpt_spec();
ArchSpec gpt_neox_spec();
ArchSpec gpt_bigcode_spec();
ArchSpec gpt2_spec();
ArchSpec gptj_spec();
ArchSpec opt_spec();
ArchSpec starcoder2_spec();
ArchSpec glm_spec();
ArchSpec baichuan_spec();
ArchSpec baichuan2_spec();
ArchSpec chatglm_spec();
ArchSpec chatglm2_spec();
ArchSpec chatglm6b_spec();
// P-tuning prefixes and the modeling files' quantized weights, refused naming the field
// (every ChatGLM generation has them).
void refuse_chatglm_extras(const HfConfig& cfg);
// The first ChatGLM-6B shares ChatGLM2's architectures and model_type (chatglm6b.cc).
bool is_chatglm6b_config(const HfConfig& cfg);
ArchSpec qwen_spec();
ArchSpec internlm_spec();
ArchSpec internlm2_spec();
// OpenELM: per-layer heads and FFN widths from its multipliers (layer-wise scaling).
ArchSpec openelm_spec();
// DeciLM / Nemotron-NAS: per-layer blocks (block_configs), some replaced by a linear map.
ArchSpec decilm_spec();
// LLaVA: a registered text family behind a CLIP vision tower (model/vision).
ArchSpec llava_spec();

}  // namespace tachyon::arch
