#include "model/lora_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/mmap.h"
#include "io/checkpoint.h"
#include "model/lora_config.h"

namespace tachyon {
namespace {

constexpr std::string_view kKeyPrefix = "base_model.model.";

// The per-layer matrices an adapter may adapt (LoraModule::slot).
constexpr Slot kAdaptedSlots[] = {Slot::kQkv,    Slot::kQ,    Slot::kK,  Slot::kV,   Slot::kO,
                                  Slot::kGateUp, Slot::kGate, Slot::kUp, Slot::kDown};

bool is_adapted_slot(Slot s) {
  return std::ranges::find(kAdaptedSlots, s) != std::end(kAdaptedSlots);
}

bool is_mlp_slot(Slot s) {
  return s == Slot::kGateUp || s == Slot::kGate || s == Slot::kUp || s == Slot::kDown;
}

// What an adapter may not adapt, for messages.
std::string_view refused_kind(Slot s) {
  if (s == Slot::kEmbedding || s == Slot::kPosEmbedding) return "the embedding";
  if (s == Slot::kLmHead) return "the lm_head";
  if (s == Slot::kRouter || s == Slot::kSharedExpertGate) return "the MoE router";
  // The expert and shared-expert matrices: kExpertGate to kSharedDown in the enum.
  if (s >= Slot::kExpertGate && s <= Slot::kSharedDown) return "an MoE expert";
  return "another weight";
}

// Matches `name` against a WeightRef pattern less ".weight": literal text, "{L}" and
// "{E}" each a run of decimal digits. Sets layer (-1 when the pattern has none).
bool match_pattern(std::string_view pattern, std::string_view name, int64_t& layer) {
  layer = -1;
  while (!pattern.empty()) {
    const bool is_layer = pattern.starts_with("{L}");
    if (is_layer || pattern.starts_with("{E}")) {
      size_t n = 0;
      while (n < name.size() && n < 9 && name[n] >= '0' && name[n] <= '9') ++n;
      if (n == 0 || (n > 1 && name[0] == '0')) return false;
      if (is_layer) layer = std::stoll(std::string(name.substr(0, n)));
      pattern.remove_prefix(3);
      name.remove_prefix(n);
      continue;
    }
    const size_t lit = std::min(pattern.find("{L}"), pattern.find("{E}"));
    const std::string_view text = pattern.substr(0, lit);
    if (!name.starts_with(text)) return false;
    pattern.remove_prefix(text.size());
    name.remove_prefix(text.size());
  }
  return name.empty();
}

struct SlotMatch {
  Slot slot = Slot::kCount;
  int64_t layer = -1;
  WeightTransform transform = WeightTransform::kNone;
};

// The slot whose weight is module `name` (Slot::kCount when none): every spelling in
// full first, then each without its first component.
SlotMatch find_slot(const WeightMap& map, const std::string& name) {
  static constexpr std::string_view kSuffix = ".weight";
  for (const bool bare : {false, true}) {
    for (const auto& [slot, ref] : map) {
      std::vector<std::string_view> names = {ref.name};
      names.insert(names.end(), ref.alternatives.begin(), ref.alternatives.end());
      for (std::string_view pattern : names) {
        if (!pattern.ends_with(kSuffix)) continue;
        pattern.remove_suffix(kSuffix.size());
        if (bare) {
          const size_t dot = pattern.find('.');
          if (dot == std::string_view::npos) continue;
          pattern.remove_prefix(dot + 1);
        }
        int64_t layer = -1;
        if (match_pattern(pattern, name, layer)) return {slot, layer, ref.transform};
      }
    }
  }
  return {};
}

struct ModuleTensors {
  std::string a, b;  // tensor names
};

// The modules of the weights file, by name, from its tensor names.
std::map<std::string, ModuleTensors> group_tensors(const Checkpoint& ckpt,
                                                   const std::string& what) {
  std::map<std::string, ModuleTensors> out;
  std::optional<std::string> adapter_name;
  for (const std::string& key : ckpt.names()) {
    if (key.find("lora_embedding_") != std::string::npos)
      raise<InvalidArgument>("{}: tensor '{}': embedding adapters are not supported", what, key);
    const size_t a = key.rfind(".lora_A."), b = key.rfind(".lora_B.");
    const size_t at = a == std::string::npos ? b : (b == std::string::npos ? a : std::max(a, b));
    if (!key.starts_with(kKeyPrefix) || at == std::string::npos || at <= kKeyPrefix.size())
      raise<InvalidArgument>(
          "{}: tensor '{}' is not a LoRA weight (base_model.model.<module>.lora_A/lora_B; "
          "modules_to_save and DoRA are not supported)",
          what, key);
    const std::string rest = key.substr(at + 8);  // after ".lora_X."
    std::string name;
    if (rest != "weight") {
      const size_t dot = rest.find('.');
      if (dot == std::string::npos || rest.substr(dot + 1) != "weight" || dot == 0)
        raise<InvalidArgument>(
            "{}: tensor '{}': {}", what, key,
            rest.ends_with("bias") ? "LoRA biases are not supported" : "not a LoRA weight");
      name = rest.substr(0, dot);
    }
    if (adapter_name && *adapter_name != name)
      raise<InvalidArgument>("{}: tensors of two adapters ('{}' and '{}'); one is supported", what,
                             *adapter_name, name);
    adapter_name = name;
    const std::string module = key.substr(kKeyPrefix.size(), at - kKeyPrefix.size());
    (at == a ? out[module].a : out[module].b) = key;
  }
  return out;
}

Tensor scaled_f32(const Tensor& t, double scale) {
  Tensor out = t.to(DType::kF32);
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i)
    p[i] = static_cast<float>(static_cast<double>(p[i]) * scale);
  return out;
}

class AdapterReader {
 public:
  AdapterReader(const std::string& dir, const ModelConfig& cfg, const WeightMap& map,
                const LoraLimits& limits, const LoraConfig& config)
      : dir_(dir), cfg_(cfg), map_(map), limits_(limits), config_(config) {}

  LoraModule module(const Checkpoint& ckpt, const std::string& name, const ModuleTensors& t,
                    uint64_t& bytes) const {
    if (t.a.empty() || t.b.empty())
      raise<InvalidArgument>("{}: module '{}' has lora_{} but no lora_{}", dir_, name,
                             t.a.empty() ? "B" : "A", t.a.empty() ? "A" : "B");
    const SlotMatch m = find_slot(map_, name);
    if (m.slot == Slot::kCount)
      raise<InvalidArgument>("{}: module '{}' matches no weight of the {} model", dir_, name,
                             cfg_.family);
    if (!is_adapted_slot(m.slot))
      raise<InvalidArgument>(
          "{}: module '{}' adapts {} ({}); adapters of the layers' attention and MLP matrices "
          "are supported",
          dir_, name, refused_kind(m.slot), slot_name(m.slot));
    const int layer = static_cast<int>(m.layer);
    if (m.layer < 0 || m.layer >= cfg_.layer_num)
      raise<InvalidArgument>("{}: module '{}': layer {} of a model of {} layers", dir_, name,
                             m.layer, cfg_.layer_num);
    if (!slot_present(cfg_, m.slot, layer))
      raise<InvalidArgument>("{}: module '{}': layer {} of the model has no {}", dir_, name, layer,
                             slot_name(m.slot));
    if (is_mlp_slot(m.slot) && cfg_.is_moe(layer))
      raise<InvalidArgument>("{}: module '{}': layer {}'s MLP is a mixture of experts", dir_, name,
                             layer);
    if (!config_.adapts(name))
      raise<InvalidArgument>(
          "{}: module '{}' is not one adapter_config.json targets (target_modules, "
          "exclude_modules, layers_to_transform)",
          dir_, name);

    const TensorInfo& ia = ckpt.info(t.a);
    const TensorInfo& ib = ckpt.info(t.b);
    for (const TensorInfo* i : {&ia, &ib})
      if (!(i->dtype == DType::kF32 || i->dtype == DType::kF16 || i->dtype == DType::kBF16))
        raise<InvalidArgument>("{}: tensor '{}' has dtype {}; supported: f32, f16, bf16", dir_,
                               i->name, dtype_name(i->dtype));
    const Shape want = slot_shape(cfg_, m.slot, layer);  // [N, K]
    const int64_t r = config_.rank_of(name);
    if (ia.shape != Shape{r, want[1]} || ib.shape != Shape{want[0], r})
      raise<InvalidArgument>(
          "{}: module '{}': lora_A {} and lora_B {}; the model and the rank {} of "
          "adapter_config.json imply [{}, {}] and [{}, {}]",
          dir_, name, shape_str(ia.shape), shape_str(ib.shape), r, r, want[1], want[0], r);
    if (limits_.max_rank > 0 && r > limits_.max_rank)
      raise<InvalidArgument>("{}: module '{}' has rank {}, past the largest served rank {}", dir_,
                             name, r, limits_.max_rank);

    LoraModule out;
    out.layer = layer;
    out.slot = m.slot;
    out.name = name;
    out.a = ckpt.get(t.a).to(DType::kF32);
    out.b = scaled_f32(ckpt.get(t.b), config_.scaling_of(name));
    const int32_t heads = cfg_.heads(layer), kv_heads = cfg_.kv_heads(layer);
    if (m.slot == Slot::kQkv && m.transform == WeightTransform::kQkvPerHead)
      out.b = reorder_qkv_per_head(out.b, heads, cfg_.size_per_head);
    if (m.slot == Slot::kQkv && m.transform == WeightTransform::kQkvGrouped)
      out.b = reorder_qkv_grouped(out.b, kv_heads, heads / kv_heads, cfg_.size_per_head);
    if (m.slot == Slot::kK) out.stacked_row = cfg_.q_size(layer);
    if (m.slot == Slot::kV) out.stacked_row = cfg_.q_size(layer) + cfg_.kv_size(layer);
    if (m.slot == Slot::kUp && cfg_.gated_mlp) out.stacked_row = cfg_.inter(layer);
    bytes += ia.shape[0] * ia.shape[1] * dtype_size(ia.dtype) +
             ib.shape[0] * ib.shape[1] * dtype_size(ib.dtype);
    return out;
  }

 private:
  const std::string& dir_;
  const ModelConfig& cfg_;
  const WeightMap& map_;
  const LoraLimits& limits_;
  const LoraConfig& config_;
};

}  // namespace

LoraAdapter load_lora_adapter(const std::string& dir, const ModelConfig& cfg, const WeightMap& map,
                              const LoraLimits& limits) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  const std::string config_path = (root / "adapter_config.json").string();
  if (!fs::is_regular_file(config_path))
    raise<NotFound>("{}: no adapter_config.json (not a PEFT adapter folder)", dir);
  const LoraConfig config = parse_lora_config(read_file(config_path), config_path);

  std::string weights = (root / "adapter_model.safetensors").string();
  if (!fs::is_regular_file(weights)) weights = (root / "adapter_model.bin").string();
  if (!fs::is_regular_file(weights))
    raise<NotFound>("{}: no adapter_model.safetensors or adapter_model.bin", dir);
  const std::unique_ptr<Checkpoint> ckpt = Checkpoint::open_files({weights});
  const std::map<std::string, ModuleTensors> tensors = group_tensors(*ckpt, weights);
  if (tensors.empty()) raise<InvalidArgument>("{}: the adapter has no LoRA weights", weights);

  LoraAdapter out;
  out.path = dir;
  const AdapterReader reader(dir, cfg, map, limits, config);
  for (const auto& [name, t] : tensors) {
    LoraModule m = reader.module(*ckpt, name, t, out.bytes);
    for (const LoraModule& o : out.modules)
      if (o.layer == m.layer && o.slot == m.slot)
        raise<InvalidArgument>("{}: modules '{}' and '{}' adapt the same weight", dir, o.name,
                               m.name);
    out.max_rank = std::max(out.max_rank, m.rank());
    out.modules.push_back(std::move(m));
  }
  std::sort(out.modules.begin(), out.modules.end(), [](const LoraModule& x, const LoraModule& y) {
    return std::pair(x.layer, x.slot) < std::pair(y.layer, y.slot);
  });
  return out;
}

}  // namespace tachyon
