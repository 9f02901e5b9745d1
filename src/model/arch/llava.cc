// LLaVA (LlavaForConditionalGeneration): a text model of any registered family behind a
// CLIP vision tower and a projector. The config's text_config maps through its own
// family, and so do the text model's weights, their names moved under the checkpoint's
// prefix: transformers 5 keeps the base model under model.language_model. and the head
// as it is; llava-hf's files keep the whole causal LM under language_model.. The image
// side is read by model/vision (vision_config.h, clip_weights.h).
#include "core/error.h"
#include "model/arch/arch.h"
#include "model/vision/vision_config.h"

namespace tachyon::arch {

namespace {

const ArchSpec& family_spec(const std::string& family) {
  for (const ArchSpec& s : arch_registry())
    if (s.family == family) return s;
  raise<InvalidArgument>("LLaVA: no text family '{}'", family);
}

ModelConfig map_llava(const HfConfig& cfg) {
  const HfConfig text = llava_text_config(cfg);
  const ArchSpec& ts = find_arch(text, "");
  if (ts.family == "llava")
    raise<InvalidArgument>("{}: a LLaVA text_config cannot be LLaVA itself", cfg.source());
  ModelConfig mc = ts.map_config(text);
  auto vision = std::make_shared<VisionModelConfig>(read_llava_vision_config(cfg));
  vision->text_family = ts.family;
  vision->text_hidden = mc.embed_dim();
  if (vision->image_token_id >= mc.vocab_size)
    raise<InvalidArgument>("{}: image_token_index {} is outside the vocabulary ({})", cfg.source(),
                           vision->image_token_id, mc.vocab_size);
  mc.vision = std::move(vision);
  return mc;
}

// A causal LM's tensor name in transformers 5's LLaVA layout: the head as it is, the base
// model's prefix (its first component) replaced by model.language_model.
std::string v5_name(Slot slot, const std::string& name) {
  if (slot == Slot::kLmHead || slot == Slot::kLmHeadBias) return name;
  const size_t dot = name.find('.');
  return "model.language_model." + (dot == std::string::npos ? name : name.substr(dot + 1));
}

WeightMap map_llava_weights(const ModelConfig& mc) {
  TACHYON_CHECK(mc.vision != nullptr, "a LLaVA config without its vision side");
  WeightMap map = family_spec(mc.vision->text_family).map_weights(mc);
  for (auto& [slot, ref] : map) {
    std::vector<std::string> names = {ref.name};
    names.insert(names.end(), ref.alternatives.begin(), ref.alternatives.end());
    ref.alternatives.clear();
    ref.name = v5_name(slot, names[0]);
    ref.alternatives.push_back("language_model." + names[0]);
    for (size_t i = 1; i < names.size(); ++i) {
      ref.alternatives.push_back(v5_name(slot, names[i]));
      ref.alternatives.push_back("language_model." + names[i]);
    }
  }
  return map;
}

}  // namespace

ArchSpec llava_spec() {
  ArchSpec s;
  s.family = "llava";
  s.architectures = {"LlavaForConditionalGeneration"};
  s.model_types = {"llava"};
  s.map_config = map_llava;
  s.map_weights = map_llava_weights;
  return s;
}

}  // namespace tachyon::arch
