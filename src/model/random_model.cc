#include "model/random_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/normal_stream.h"
#include "model/registry.h"

namespace tachyon {
namespace {

enum class Scope { kGlobal, kLayer, kExpert };

Scope scope_of(Slot s) {
  switch (s) {
    case Slot::kEmbedding:
    case Slot::kPosEmbedding:
    case Slot::kEmbedNorm:
    case Slot::kEmbedNormBias:
    case Slot::kProjectIn:
    case Slot::kProjectOut:
    case Slot::kFinalNorm:
    case Slot::kFinalNormBias:
    case Slot::kLmHead:
    case Slot::kLmHeadBias:
      return Scope::kGlobal;
    case Slot::kExpertGate:
    case Slot::kExpertUp:
    case Slot::kExpertGateUp:
    case Slot::kExpertDown:
      return Scope::kExpert;
    default:
      return Scope::kLayer;
  }
}

bool moe_only(Slot s) {
  switch (s) {
    case Slot::kRouter:
    case Slot::kExpertGate:
    case Slot::kExpertUp:
    case Slot::kExpertGateUp:
    case Slot::kExpertDown:
    case Slot::kExpertsGateUp:
    case Slot::kExpertsDown:
    case Slot::kSharedGate:
    case Slot::kSharedUp:
    case Slot::kSharedDown:
    case Slot::kSharedExpertGate:
      return true;
    default:
      return false;
  }
}

bool dense_only(Slot s) {
  switch (s) {
    case Slot::kGateUp:
    case Slot::kGate:
    case Slot::kGateBias:
    case Slot::kUp:
    case Slot::kUpBias:
    case Slot::kDown:
    case Slot::kDownBias:
      return true;
    default:
      return false;
  }
}

RandomTensorSpec::Kind kind_of(Slot s) {
  switch (s) {
    case Slot::kEmbedNorm:
    case Slot::kFinalNorm:
    case Slot::kAttnNorm:
    case Slot::kMlpNorm:
    case Slot::kPostAttnNorm:
    case Slot::kPostMlpNorm:
    case Slot::kQNorm:
    case Slot::kKNorm:
      return RandomTensorSpec::kNormScale;
    case Slot::kEmbedNormBias:
    case Slot::kFinalNormBias:
    case Slot::kLmHeadBias:
    case Slot::kAttnNormBias:
    case Slot::kMlpNormBias:
    case Slot::kQkvBias:
    case Slot::kQBias:
    case Slot::kKBias:
    case Slot::kVBias:
    case Slot::kOBias:
    case Slot::kGateBias:
    case Slot::kUpBias:
    case Slot::kDownBias:
      return RandomTensorSpec::kBias;
    default:
      return RandomTensorSpec::kMatrix;
  }
}

std::string substitute(std::string name, int layer, int expert) {
  auto replace = [&](const std::string& key, int v) {
    for (size_t p = name.find(key); p != std::string::npos; p = name.find(key))
      name.replace(p, key.size(), std::to_string(v));
  };
  replace("{L}", layer);
  replace("{E}", expert);
  return name;
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Tensor make_tensor(const RandomTensorSpec& spec, DType dtype, uint64_t seed, uint64_t index,
                   float norm_center, ThreadPool& pool) {
  Tensor t = Tensor::empty(spec.shape, dtype);
  const int64_t n = t.numel();
  float scale = 0.02f, center = 0.f;
  if (spec.kind == RandomTensorSpec::kNormScale) {
    scale = 0.05f;
    center = norm_center;
  }
  // Chunks of the tensor draw in parallel, each from its own NormalStream (the fixtures'
  // generator) seeded from (seed, tensor index, chunk).
  constexpr int64_t kChunk = 1 << 16;
  pool.run((n + kChunk - 1) / kChunk, [&](int64_t c) {
    uint64_t state = seed * 0x100000001b3ULL ^ (index << 32) ^ static_cast<uint64_t>(c);
    NormalStream stream(static_cast<uint32_t>(splitmix64(state) >> 32));
    const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
    std::vector<double> z(static_cast<size_t>(std::max<int64_t>(e - b, 16)));
    stream.normal(z.data(), static_cast<int64_t>(z.size()));
    for (int64_t i = b; i < e; ++i) {
      const float v = center + scale * static_cast<float>(z[static_cast<size_t>(i - b)]);
      switch (dtype) {
        case DType::kF32:
          t.data<float>()[i] = v;
          break;
        case DType::kBF16:
          static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(v).bits;
          break;
        case DType::kF16:
          static_cast<uint16_t*>(t.raw())[i] = f32_to_f16(v).bits;
          break;
        default:
          break;
      }
    }
  });
  return t;
}

}  // namespace

std::vector<RandomTensorSpec> plan_random_tensors(const ModelConfig& cfg, const WeightMap& map) {
  std::vector<RandomTensorSpec> out;
  auto add = [&](Slot s, const WeightRef& ref, int layer, int expert) {
    Shape shape = slot_shape(cfg, s, layer);
    if (ref.transform == WeightTransform::kTranspose && shape.size() == 2)
      shape = {shape[1], shape[0]};
    out.push_back({substitute(ref.name, layer, expert), shape, kind_of(s)});
  };
  for (const auto& [slot, ref] : map) {
    if (scope_of(slot) != Scope::kGlobal) continue;
    if (slot == Slot::kLmHead) {
      if (cfg.tie_word_embeddings) continue;
    } else if (ref.optional) {
      continue;
    }
    if (slot == Slot::kPosEmbedding && cfg.position != PositionType::kLearned) continue;
    add(slot, ref, -1, -1);
  }
  for (int l = 0; l < cfg.layer_num; ++l) {
    for (const auto& [slot, ref] : map) {
      const Scope sc = scope_of(slot);
      if (sc == Scope::kGlobal || ref.optional) continue;
      if (moe_only(slot) && !cfg.is_moe(l)) continue;
      if (dense_only(slot) && cfg.is_moe(l)) continue;
      // A pruned layer's absent block has no weights.
      if (!slot_present(cfg, slot, l)) continue;
      if (sc == Scope::kExpert) {
        for (int e = 0; e < cfg.moe.num_experts; ++e) add(slot, ref, l, e);
      } else {
        add(slot, ref, l, -1);
      }
    }
  }
  return out;
}

uint64_t write_random_lora(const std::string& config_path, const std::string& out_dir, int32_t rank,
                           const RandomModelOptions& opts) {
  namespace fs = std::filesystem;
  if (rank <= 0 || rank > 4096) raise<InvalidArgument>("make-random: LoRA rank {}", rank);
  HfConfig cfg = HfConfig::load(config_path);
  const ArchSpec& spec = find_arch(cfg, "");
  ModelConfig mc = map_model_config(cfg, "");
  const WeightMap map = spec.map_weights(mc);
  std::vector<RandomTensorSpec> plan;
  std::set<std::string> targets;
  for (Slot s : {Slot::kQkv, Slot::kQ, Slot::kK, Slot::kV, Slot::kO, Slot::kGateUp, Slot::kGate,
                 Slot::kUp, Slot::kDown}) {
    auto it = map.find(s);
    if (it == map.end() || it->second.transform != WeightTransform::kNone) continue;
    std::string name = it->second.name;
    const std::string suffix = ".weight";
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    name.resize(name.size() - suffix.size());
    targets.insert(name.substr(name.rfind('.') + 1));
    for (int32_t l = 0; l < mc.layer_num; ++l) {
      if (!slot_present(mc, s, l) || (mc.is_moe(l) && s >= Slot::kGateUp)) continue;
      const Shape shape = slot_shape(mc, s, l);
      std::string module = name;
      module.replace(module.find("{L}"), 3, std::to_string(l));
      plan.push_back({"base_model.model." + module + ".lora_A.weight", {rank, shape[1]}});
      plan.push_back({"base_model.model." + module + ".lora_B.weight", {shape[0], rank}});
    }
  }
  if (plan.empty())
    raise<InvalidArgument>("make-random: no linear layer of {} to adapt", mc.architecture);
  fs::create_directories(out_dir);
  Json ac = {{"peft_type", "LORA"},
             {"r", rank},
             {"lora_alpha", 2 * rank},
             {"target_modules", Json(std::vector<std::string>(targets.begin(), targets.end()))},
             {"bias", "none"},
             {"lora_dropout", 0.0},
             {"fan_in_fan_out", false},
             {"use_rslora", false},
             {"task_type", "CAUSAL_LM"}};
  {
    std::ofstream f(fs::path(out_dir) / "adapter_config.json");
    f << ac.dump(2) << "\n";
    if (!f) raise<InvalidArgument>("cannot write {}/adapter_config.json", out_dir);
  }
  NamedTensors tensors;
  uint64_t params = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    tensors.emplace_back(plan[i].name,
                         make_tensor(plan[i], opts.dtype, opts.seed, i, 0.f, ThreadPool::global()));
    params += static_cast<uint64_t>(shape_numel(plan[i].shape));
  }
  write_safetensors((fs::path(out_dir) / "adapter_model.safetensors").string(), tensors,
                    {{"format", "pt"}});
  return params;
}

uint64_t write_random_model(const std::string& config_path, const std::string& out_dir,
                            const RandomModelOptions& opts) {
  namespace fs = std::filesystem;
  if (!(opts.dtype == DType::kF32 || opts.dtype == DType::kF16 || opts.dtype == DType::kBF16))
    raise<InvalidArgument>("make-random: dtype must be f32, f16 or bf16, got {}",
                           dtype_name(opts.dtype));
  HfConfig cfg = HfConfig::load(config_path);
  const ArchSpec& spec = find_arch(cfg, "");
  ModelConfig mc = map_model_config(cfg, "");
  const WeightMap map = spec.map_weights(mc);
  const std::vector<RandomTensorSpec> plan = plan_random_tensors(mc, map);

  fs::create_directories(out_dir);
  Json out_cfg = cfg.json();
  const char* torch_name = opts.dtype == DType::kBF16  ? "bfloat16"
                           : opts.dtype == DType::kF16 ? "float16"
                                                       : "float32";
  if (out_cfg.contains("dtype")) out_cfg["dtype"] = torch_name;
  out_cfg["torch_dtype"] = torch_name;
  {
    std::ofstream f(fs::path(out_dir) / "config.json");
    f << out_cfg.dump(2) << "\n";
    if (!f) raise<InvalidArgument>("cannot write {}/config.json", out_dir);
  }

  // Group tensors into shards of at most shard_bytes (one shard when it all fits).
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0, total_bytes = 0, params = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const uint64_t bytes =
        static_cast<uint64_t>(shape_numel(plan[i].shape)) * dtype_size(opts.dtype);
    if (cur > 0 && cur + bytes > opts.shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += bytes;
    total_bytes += bytes;
    params += static_cast<uint64_t>(shape_numel(plan[i].shape));
  }
  const float norm_center = mc.norm_weight_offset != 0.f ? 0.f : 1.f;
  ThreadPool& pool = ThreadPool::global();
  Json weight_map = Json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? "model.safetensors"
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors",
                                                              s + 1, shards.size());
    NamedTensors tensors;
    for (size_t i : shards[s]) {
      tensors.emplace_back(plan[i].name,
                           make_tensor(plan[i], opts.dtype, opts.seed, i, norm_center, pool));
      weight_map[plan[i].name] = file;
    }
    write_safetensors((fs::path(out_dir) / file).string(), tensors, {{"format", "pt"}});
  }
  if (shards.size() > 1) {
    Json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    std::ofstream f(fs::path(out_dir) / "model.safetensors.index.json");
    f << index.dump(2) << "\n";
  }
  return params;
}

}  // namespace tachyon
