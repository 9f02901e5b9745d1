#include "model/registry.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "model/arch/arch.h"

namespace tachyon {

const std::vector<ArchSpec>& arch_registry() {
  static const std::vector<ArchSpec> registry = {
      arch::llama_spec(),
      arch::mistral_spec(),
      arch::mixtral_spec(),
      arch::qwen2_spec(),
      arch::qwen2_moe_spec(),
      arch::qwen3_spec(),
      arch::gemma_spec(),
      arch::gemma2_spec(),
      arch::phi_spec(),
      arch::phi3_spec(),
      arch::falcon_spec(),
      arch::bloom_spec(),
      arch::mpt_spec(),
      arch::gpt_neox_spec(),
      arch::gpt_bigcode_spec(),
      arch::gpt2_spec(),
      arch::gptj_spec(),
      arch::opt_spec(),
      arch::starcoder2_spec(),
      arch::glm_spec(),
      // Multimodal: a text family of the above behind a vision tower.
      arch::llava_spec(),
      // Remote-code checkpoints (their own modeling files on the hub).
      arch::baichuan_spec(),
      arch::chatglm_spec(),
      arch::qwen_spec(),
      arch::internlm_spec(),
      arch::internlm2_spec(),
      arch::openelm_spec(),
      arch::decilm_spec(),
      // Reached only by name (--model-type): configs that cannot be told apart.
      arch::baichuan2_spec(),
      arch::chatglm2_spec(),
      // A variant carrying another family's names, told apart by its config's fields
      // (variant_of / is_variant); also reached by name.
      arch::chatglm6b_spec(),
  };
  return registry;
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const ArchSpec* match(const std::string& name, bool by_family, bool by_arch, bool by_type) {
  const std::string key = lower(name);
  for (const ArchSpec& s : arch_registry()) {
    if (by_family && lower(s.family) == key) return &s;
    if (by_arch)
      for (const auto& a : s.architectures)
        if (lower(a) == key) return &s;
    if (by_type)
      for (const auto& t : s.model_types)
        if (lower(t) == key) return &s;
  }
  return nullptr;
}

// The variant of s that claims the config, else s.
const ArchSpec& resolve_variant(const ArchSpec& s, const HfConfig& cfg) {
  for (const ArchSpec& v : arch_registry())
    if (v.variant_of == s.family && v.is_variant != nullptr && v.is_variant(cfg)) return v;
  return s;
}

}  // namespace

std::string supported_architectures() {
  std::string out;
  for (const ArchSpec& s : arch_registry())
    for (const auto& a : s.architectures) {
      if (!out.empty()) out += ", ";
      out += a;
    }
  return out;
}

const ArchSpec& find_arch(const HfConfig& cfg, const std::string& override_type) {
  if (!override_type.empty()) {
    if (const ArchSpec* s = match(override_type, true, true, true)) return resolve_variant(*s, cfg);
    raise<InvalidArgument>("unknown model type '{}' (from --model-type); supported: {}",
                           override_type, supported_architectures());
  }
  std::string arch_name;
  if (const Json* a = cfg.find({"architectures"});
      a != nullptr && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    arch_name = (*a)[0].get<std::string>();
    if (const ArchSpec* s = match(arch_name, false, true, false)) return resolve_variant(*s, cfg);
  }
  auto model_type = cfg.get_string({"model_type"});
  if (model_type) {
    if (const ArchSpec* s = match(*model_type, false, false, true)) return resolve_variant(*s, cfg);
  }
  raise<InvalidArgument>("{}: unsupported architecture '{}' (model_type '{}'); supported: {}",
                         cfg.source(), arch_name.empty() ? "?" : arch_name,
                         model_type.value_or("?"), supported_architectures());
}

ModelConfig map_model_config(const HfConfig& cfg, const std::string& override_type,
                             const std::string& generation_config_path,
                             const std::string& quantize_config_path,
                             const std::string& sparse_config_path) {
  const ArchSpec& spec = find_arch(cfg, override_type);
  ModelConfig mc = spec.map_config(cfg);
  mc.family = spec.family;
  if (const Json* a = cfg.find({"architectures"});
      a != nullptr && a->is_array() && !a->empty() && (*a)[0].is_string())
    mc.architecture = (*a)[0].get<std::string>();
  // Families reached only by name (no architectures of their own) keep the config's.
  if ((mc.architecture.empty() || !override_type.empty()) && !spec.architectures.empty())
    mc.architecture = spec.architectures.front();
  mc.model_type = cfg.get_string({"model_type"})
                      .value_or(spec.model_types.empty() ? spec.family : spec.model_types.front());
  if (!generation_config_path.empty()) apply_generation_config(generation_config_path, mc);
  mc.quant = read_quant_config(cfg.json(), cfg.source(), quantize_config_path);
  if (mc.rope.max_position_embeddings == 0) mc.rope.max_position_embeddings = mc.max_seq_len;
  read_layer_shapes(cfg, sparse_config_path, mc);
  mc.validate();
  return mc;
}

}  // namespace tachyon
