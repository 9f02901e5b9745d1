#include "model/quant_writer.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/logging.h"
#include "io/checkpoint.h"
#include "model/registry.h"

namespace tachyon {
namespace {

void require_int(const QuantizedMatrix& m, const char* format) {
  if (m.scheme != QuantScheme::kInt || m.perm || !m.device().is_cpu())
    raise<InvalidArgument>("{}: cannot write {} (an integer host matrix without a perm)", format,
                           m.str());
}

Tensor f16_scales(const QuantizedMatrix& m) {
  // [groups, n] in f16 from the matrix's [n, groups] f32.
  const int64_t g = m.groups();
  Tensor t = Tensor::empty({g, m.n}, DType::kF32);
  for (int64_t i = 0; i < m.n; ++i)
    for (int64_t gi = 0; gi < g; ++gi)
      t.data<float>()[gi * m.n + i] = m.scales.data<float>()[i * g + gi];
  return t.to(DType::kF16);
}

// Slots whose modules a quantization covers: the decoder's linears, not the router.
constexpr Slot kQuantizedSlots[] = {
    Slot::kQkv,        Slot::kQ,          Slot::kK,        Slot::kV,
    Slot::kO,          Slot::kGateUp,     Slot::kGate,     Slot::kUp,
    Slot::kDown,       Slot::kExpertGate, Slot::kExpertUp, Slot::kExpertGateUp,
    Slot::kExpertDown, Slot::kSharedGate, Slot::kSharedUp, Slot::kSharedDown,
};

std::string substitute(std::string name, int layer, int expert) {
  auto replace = [&](const std::string& key, int v) {
    for (size_t p = name.find(key); p != std::string::npos; p = name.find(key))
      name.replace(p, key.size(), std::to_string(v));
  };
  replace("{L}", layer);
  replace("{E}", expert);
  return name;
}

// Every checkpoint name a quantized slot's weight may have (each spelling, with and
// without the wrapper prefix).
std::set<std::string> quantized_names(const ModelConfig& cfg, const WeightMap& map) {
  std::set<std::string> out;
  for (Slot s : kQuantizedSlots) {
    auto it = map.find(s);
    if (it == map.end() || it->second.transform != WeightTransform::kNone) continue;
    std::vector<std::string> names = {it->second.name};
    names.insert(names.end(), it->second.alternatives.begin(), it->second.alternatives.end());
    const bool per_expert = s == Slot::kExpertGate || s == Slot::kExpertUp ||
                            s == Slot::kExpertGateUp || s == Slot::kExpertDown;
    const int experts = per_expert ? std::max(cfg.moe.num_experts, 1) : 1;
    for (int l = 0; l < cfg.layer_num; ++l)
      for (int e = 0; e < experts; ++e)
        for (const std::string& pattern : names) {
          const std::string name = substitute(pattern, l, e);
          if (!name.ends_with(".weight")) continue;
          out.insert(name);
          if (const size_t dot = name.find('.'); dot != std::string::npos)
            out.insert(name.substr(dot + 1));
        }
  }
  return out;
}

}  // namespace

std::optional<QuantizeSpec> quantize_method_spec(std::string_view method) {
  QuantizeSpec s;
  if (method == "int8") {
    s.bits = 8;
    s.group_size = -1;
  } else if (method == "int4") {
    s.bits = 4;
    s.group_size = 128;
  } else if (method == "fp8") {
    s.format = QuantFormat::kFp8;
  } else {
    return std::nullopt;
  }
  return s;
}

std::optional<QuantizeSpec> quant_format_spec(std::string_view format) {
  if (format == "gptq") return quantize_method_spec("int4");
  if (format == "fp8") return quantize_method_spec("fp8");
  if (format == "awq") {
    QuantizeSpec s;
    s.format = QuantFormat::kAwq;
    s.symmetric = false;
    return s;
  }
  return std::nullopt;
}

int64_t group_size_for(const QuantizeSpec& spec, int64_t k) {
  return spec.group_size > 0 && k % spec.group_size == 0 ? spec.group_size : k;
}

std::shared_ptr<QuantizedMatrix> quantize_for(const QuantizeSpec& spec, const Tensor& w) {
  if (spec.format == QuantFormat::kFp8) return quantize_fp8(w, spec.block, spec.block);
  if (w.ndim() != 2) raise<InvalidArgument>("quantize: {} is not a matrix", w.str());
  const int64_t gs = group_size_for(spec, w.dim(1));
  if (spec.format == QuantFormat::kAwq && gs != spec.group_size)
    raise<InvalidArgument>("AWQ: group size {} does not divide the {} columns of {}",
                           spec.group_size, w.dim(1), w.str());
  return quantize_int(w, spec.bits, gs, spec.symmetric);
}

NamedTensors gptq_tensors(const std::string& module, const QuantizedMatrix& m) {
  require_int(m, "GPTQ");
  const int32_t bits = m.bits;
  const int64_t pack = 32 / bits;
  if (m.n % pack != 0 || m.k % pack != 0)
    raise<InvalidArgument>("GPTQ: {} needs both dimensions divisible by {}", m.str(), pack);
  const int64_t g = m.groups();
  const uint32_t mask = (1u << bits) - 1;
  Tensor qweight = Tensor::zeros({m.k / pack, m.n}, DType::kI32);
  auto* qw = qweight.data<int32_t>();
  for (int64_t i = 0; i < m.n; ++i)
    for (int64_t j = 0; j < m.k; ++j)
      qw[(j / pack) * m.n + i] = static_cast<int32_t>(
          static_cast<uint32_t>(qw[(j / pack) * m.n + i]) | (m.value(i, j) << (bits * (j % pack))));
  Tensor qzeros = Tensor::zeros({g, m.n / pack}, DType::kI32);
  auto* qz = qzeros.data<int32_t>();
  for (int64_t gi = 0; gi < g; ++gi)
    for (int64_t i = 0; i < m.n; ++i) {
      // checkpoint_format "gptq" stores zero - 1.
      const uint32_t z = (m.zeros.data<uint8_t>()[i * g + gi] - 1u) & mask;
      int32_t& word = qz[gi * (m.n / pack) + i / pack];
      word = static_cast<int32_t>(static_cast<uint32_t>(word) | (z << (bits * (i % pack))));
    }
  Tensor g_idx = Tensor::empty({m.k}, DType::kI32);
  for (int64_t j = 0; j < m.k; ++j)
    g_idx.data<int32_t>()[j] = static_cast<int32_t>(j / m.group_size);
  return {{module + ".qweight", qweight},
          {module + ".qzeros", qzeros},
          {module + ".scales", f16_scales(m)},
          {module + ".g_idx", g_idx}};
}

NamedTensors awq_tensors(const std::string& module, const QuantizedMatrix& m) {
  require_int(m, "AWQ");
  if (m.bits != 4 || m.n % 8 != 0)
    raise<InvalidArgument>("AWQ: {} is not 4-bit with rows divisible by 8", m.str());
  // Nibble p of each word holds column kOrder[p] of its eight.
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const int64_t g = m.groups();
  Tensor qweight = Tensor::zeros({m.k, m.n / 8}, DType::kI32);
  Tensor qzeros = Tensor::zeros({g, m.n / 8}, DType::kI32);
  for (int64_t c = 0; c < m.n / 8; ++c)
    for (int p = 0; p < 8; ++p) {
      const int64_t i = c * 8 + kOrder[p];
      for (int64_t j = 0; j < m.k; ++j) {
        int32_t& w = qweight.data<int32_t>()[j * (m.n / 8) + c];
        w = static_cast<int32_t>(static_cast<uint32_t>(w) | (m.value(i, j) << (4 * p)));
      }
      for (int64_t gi = 0; gi < g; ++gi) {
        int32_t& w = qzeros.data<int32_t>()[gi * (m.n / 8) + c];
        w = static_cast<int32_t>(static_cast<uint32_t>(w) |
                                 (uint32_t{m.zeros.data<uint8_t>()[i * g + gi]} << (4 * p)));
      }
    }
  return {{module + ".qweight", qweight},
          {module + ".qzeros", qzeros},
          {module + ".scales", f16_scales(m)}};
}

NamedTensors fp8_tensors(const std::string& module, const QuantizedMatrix& m) {
  if (m.scheme != QuantScheme::kFp8 || !m.device().is_cpu())
    raise<InvalidArgument>("FP8: cannot write {}", m.str());
  return {{module + ".weight", m.q}, {module + ".weight_scale_inv", m.scales}};
}

Json quantization_config_json(const QuantizeSpec& spec) {
  switch (spec.format) {
    case QuantFormat::kGptq:
      return {{"quant_method", "gptq"}, {"bits", spec.bits},     {"group_size", spec.group_size},
              {"desc_act", false},      {"sym", spec.symmetric}, {"checkpoint_format", "gptq"},
              {"lm_head", false}};
    case QuantFormat::kAwq:
      return {{"quant_method", "awq"},
              {"bits", spec.bits},
              {"group_size", spec.group_size},
              {"zero_point", !spec.symmetric},
              {"version", "gemm"}};
    case QuantFormat::kFp8:
      return {{"quant_method", "fp8"},
              {"activation_scheme", "dynamic"},
              {"weight_block_size", {spec.block, spec.block}}};
  }
  return {};
}

QuantizeSummary quantize_model(const std::string& in_dir, const std::string& out_dir,
                               const QuantizeSpec& spec, const std::string& model_type) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(out_dir) && fs::equivalent(in_dir, out_dir, ec))
    raise<InvalidArgument>("quantize: the output folder '{}' is the input folder", out_dir);
  const fs::path cfg_path = fs::path(in_dir) / "config.json";
  if (!fs::exists(cfg_path)) raise<NotFound>("no config.json in model folder '{}'", in_dir);
  const HfConfig cfg = HfConfig::load(cfg_path.string());
  const ModelConfig mc = map_model_config(cfg, model_type);
  if (mc.quant.enabled())
    raise<InvalidArgument>("quantize: '{}' is already quantized ({})", in_dir, mc.quant.str());
  const WeightMap map = find_arch(cfg, model_type).map_weights(mc);
  const std::set<std::string> targets = quantized_names(mc, map);
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(in_dir);

  QuantizeSummary sum;
  NamedTensors out;
  for (const std::string& name : ckpt->names()) {
    Tensor t = ckpt->get(name);
    const bool dense =
        t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16;
    if (!targets.count(name) || t.ndim() != 2 || !dense) {
      out.emplace_back(name, t);
      continue;
    }
    const std::string module = name.substr(0, name.size() - std::string_view(".weight").size());
    const std::shared_ptr<QuantizedMatrix> m = quantize_for(spec, t);
    NamedTensors parts = spec.format == QuantFormat::kGptq  ? gptq_tensors(module, *m)
                         : spec.format == QuantFormat::kAwq ? awq_tensors(module, *m)
                                                            : fp8_tensors(module, *m);
    ++sum.matrices;
    sum.bytes_in += t.nbytes();
    for (auto& p : parts) {
      sum.bytes_out += p.second.nbytes();
      out.push_back(std::move(p));
    }
  }
  if (sum.matrices == 0)
    raise<InvalidArgument>("quantize: no linear weight of '{}' was found to quantize", in_dir);

  fs::create_directories(out_dir);
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  Json out_cfg = cfg.json();
  out_cfg["quantization_config"] = quantization_config_json(spec);
  {
    std::ofstream f(fs::path(out_dir) / "config.json");
    f << out_cfg.dump(2) << "\n";
    if (!f) raise<InvalidArgument>("cannot write {}/config.json", out_dir);
  }
  // The other files (tokenizer, generation config, chat template) as they are.
  for (const auto& e : fs::directory_iterator(in_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string file = e.path().filename().string();
    if (file == "config.json" || file == "quantize_config.json" || file.ends_with(".safetensors") ||
        file.ends_with(".bin") || file.ends_with(".index.json") || file.ends_with(".pt") ||
        file.ends_with(".pth"))
      continue;
    fs::copy_file(e.path(), fs::path(out_dir) / file, fs::copy_options::overwrite_existing);
  }
  log_info("quantized {} matrices: {:.1f} MiB -> {:.1f} MiB", sum.matrices,
           static_cast<double>(sum.bytes_in) / (1 << 20),
           static_cast<double>(sum.bytes_out) / (1 << 20));
  return sum;
}

}  // namespace tachyon
