#include "model/quant_config.h"

#include <fmt/format.h>

#include <cctype>
#include <regex>
#include <tuple>

#include "core/error.h"
#include "core/mmap.h"
#include "model/hf_config.h"

namespace tachyon {
namespace {

std::vector<std::string> string_list(const HfConfig& c, std::string_view field) {
  std::vector<std::string> out;
  const Json* v = c.find({field});
  if (v == nullptr) return out;
  if (!v->is_array())
    raise<InvalidArgument>("{}: field '{}' must be a list of strings, got {}", c.source(), field,
                           json_type_name(*v));
  for (const Json& x : *v) {
    if (!x.is_string())
      raise<InvalidArgument>("{}: field '{}' must hold strings, got {}", c.source(), field,
                             json_type_name(x));
    out.push_back(x.get<std::string>());
  }
  return out;
}

int32_t int_bits(const HfConfig& c, std::string_view field) {
  const auto b = c.get_int({field});
  if (!b) raise<InvalidArgument>("{}: missing field '{}'", c.source(), field);
  if (*b != 4 && *b != 8)
    raise<InvalidArgument>("{}: field '{}': bits {} is not supported (4 or 8)", c.source(), field,
                           *b);
  return static_cast<int32_t>(*b);
}

int64_t group_size_of(const HfConfig& c, std::string_view field, int64_t fallback) {
  const int64_t g = c.get_int({field}).value_or(fallback);
  if (g != -1 && g <= 0)
    raise<InvalidArgument>("{}: field '{}' must be positive or -1, got {}", c.source(), field, g);
  return g;
}

// A pair of positive integers ([bn, bk]).
std::pair<int64_t, int64_t> block_of(const HfConfig& c, std::string_view field) {
  const Json* v = c.find({field});
  if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[0].is_number_integer() ||
      !(*v)[1].is_number_integer() || (*v)[0].get<int64_t>() <= 0 || (*v)[1].get<int64_t>() <= 0 ||
      (*v)[0].get<int64_t>() > (int64_t{1} << 30) || (*v)[1].get<int64_t>() > (int64_t{1} << 30))
    raise<InvalidArgument>("{}: field '{}' must be two positive integers [rows, columns], got {}",
                           c.source(), field, v ? v->dump() : std::string("nothing"));
  return {(*v)[0].get<int64_t>(), (*v)[1].get<int64_t>()};
}

// The compressed-tensors regex check: "re:" patterns match from the start of the
// name (Python's re.match), a plain name matches exactly or as the name's last
// components.
bool target_matches(const std::string& target, const std::string& module) {
  if (target.rfind("re:", 0) == 0) {
    const std::regex re(target.substr(3));
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  }
  if (target == module) return true;
  return module.size() > target.size() &&
         module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

void check_regexes(const std::vector<std::string>& list, const std::string& source,
                   std::string_view field) {
  for (const std::string& t : list) {
    if (t.rfind("re:", 0) != 0) continue;
    if (t.size() > 512)
      raise<InvalidArgument>("{}: field '{}': a regular expression of {} characters (at most 512)",
                             source, field, t.size() - 3);
    try {
      std::regex re(t.substr(3));
    } catch (const std::regex_error&) {
      raise<InvalidArgument>("{}: field '{}': invalid regular expression '{}'", source, field,
                             t.substr(3));
    }
  }
}

CtScheme parse_ct_scheme(const HfConfig& group) {
  CtScheme s;
  s.targets = string_list(group, "targets");
  if (s.targets.empty())
    raise<InvalidArgument>("{}: field 'targets' must list the quantized modules", group.source());
  check_regexes(s.targets, group.source(), "targets");
  const HfConfig w = group.sub("weights");
  if (w.json().empty()) raise<InvalidArgument>("{}: missing field 'weights'", group.source());
  const std::string type = w.get_string({"type"}).value_or("int");
  if (type != "int" && type != "float")
    raise<InvalidArgument>("{}: field 'type': '{}' is not supported (int, float)", w.source(),
                           type);
  s.is_float = type == "float";
  s.bits = s.is_float ? static_cast<int32_t>(w.int_or({"num_bits"}, 8)) : int_bits(w, "num_bits");
  if (s.is_float && s.bits != 8)
    raise<InvalidArgument>("{}: field 'num_bits': float weights of {} bits (8 is supported)",
                           w.source(), s.bits);
  s.symmetric = w.bool_or({"symmetric"}, true);
  const std::string strategy = w.get_string({"strategy"}).value_or("tensor");
  if (strategy == "tensor") {
    s.strategy = CtStrategy::kTensor;
  } else if (strategy == "channel") {
    s.strategy = CtStrategy::kChannel;
  } else if (strategy == "group") {
    s.strategy = CtStrategy::kGroup;
    s.group_size = group_size_of(w, "group_size", 0);
    if (s.group_size <= 0)
      raise<InvalidArgument>("{}: strategy 'group' needs a positive field 'group_size'",
                             w.source());
  } else if (strategy == "block") {
    s.strategy = CtStrategy::kBlock;
    std::tie(s.block_n, s.block_k) = block_of(w, "block_structure");
  } else {
    raise<InvalidArgument>(
        "{}: field 'strategy': '{}' is not supported (tensor, channel, group, block)", w.source(),
        strategy);
  }
  if (s.is_float && s.strategy == CtStrategy::kGroup)
    raise<InvalidArgument>("{}: float weights with strategy 'group' are not supported", w.source());
  if (s.is_float && !s.symmetric)
    raise<InvalidArgument>("{}: asymmetric float weights are not supported", w.source());
  if (!s.is_float && s.strategy == CtStrategy::kBlock)
    raise<InvalidArgument>("{}: int weights with strategy 'block' are not supported", w.source());
  return s;
}

void parse_compressed_tensors(const HfConfig& c, QuantConfig& q) {
  const std::string format = c.get_string({"format"}).value_or("");
  if (format == "float-quantized") {
    q.ct_format = CtFormat::kFloatQuantized;
  } else if (format == "pack-quantized") {
    q.ct_format = CtFormat::kPackQuantized;
  } else if (format == "naive-quantized" || format == "int-quantized") {
    q.ct_format = CtFormat::kNaiveQuantized;
  } else {
    raise<InvalidArgument>(
        "{}: field 'format': '{}' is not supported (float-quantized, pack-quantized, "
        "naive-quantized, int-quantized)",
        c.source(), format);
  }
  const HfConfig groups = c.sub("config_groups");
  if (groups.json().empty())
    raise<InvalidArgument>("{}: field 'config_groups' must name at least one group", c.source());
  for (const auto& [name, value] : groups.json().items()) {
    (void)value;
    q.ct_schemes.push_back(parse_ct_scheme(groups.sub(name)));
    const CtScheme& s = q.ct_schemes.back();
    const bool float_format = q.ct_format == CtFormat::kFloatQuantized;
    if (s.is_float != float_format)
      raise<InvalidArgument>("{}: group '{}' holds {} weights, but the format is '{}'", c.source(),
                             name, s.is_float ? "float" : "int", format);
  }
  q.ignore = string_list(c, "ignore");
  check_regexes(q.ignore, c.source(), "ignore");
}

}  // namespace

std::string_view quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::kNone:
      return "none";
    case QuantMethod::kGptq:
      return "gptq";
    case QuantMethod::kAwq:
      return "awq";
    case QuantMethod::kFp8:
      return "fp8";
    case QuantMethod::kCompressedTensors:
      return "compressed-tensors";
  }
  return "?";
}

QuantConfig parse_quant_config(const Json& json, const std::string& source) {
  const HfConfig c(json, source);
  QuantConfig q;
  const auto method = c.get_string({"quant_method"});
  if (!method) raise<InvalidArgument>("{}: missing field 'quant_method'", source);
  if (*method == "gptq") {
    q.method = QuantMethod::kGptq;
    q.bits = int_bits(c, "bits");
    q.group_size = group_size_of(c, "group_size", -1);
    q.desc_act = c.bool_or({"desc_act"}, false);
    q.sym = c.bool_or({"sym"}, true);
    const std::string fmt = c.get_string({"checkpoint_format"}).value_or("gptq");
    if (fmt != "gptq" && fmt != "gptq_v2")
      raise<InvalidArgument>("{}: field 'checkpoint_format': '{}' is not supported (gptq, gptq_v2)",
                             source, fmt);
    q.gptq_v1 = fmt == "gptq";
    q.lm_head = c.bool_or({"lm_head"}, false);
  } else if (*method == "awq") {
    q.method = QuantMethod::kAwq;
    q.bits = int_bits(c, "bits");
    if (q.bits != 4)
      raise<InvalidArgument>("{}: field 'bits': AWQ with bits {} is not supported (4)", source,
                             q.bits);
    q.group_size = group_size_of(c, "group_size", -1);
    q.zero_point = c.bool_or({"zero_point"}, true);
    const std::string version = c.get_string({"version"}).value_or("gemm");
    std::string lower;
    for (char ch : version)
      lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower != "gemm" && lower != "gemv")
      raise<InvalidArgument>("{}: field 'version': '{}' is not supported (gemm, gemv)", source,
                             version);
    q.awq_gemv = lower == "gemv";
    q.modules_to_not_convert = string_list(c, "modules_to_not_convert");
  } else if (*method == "fp8") {
    q.method = QuantMethod::kFp8;
    if (c.has({"weight_block_size"}))
      std::tie(q.block_n, q.block_k) = block_of(c, "weight_block_size");
    const std::string act = c.get_string({"activation_scheme"}).value_or("dynamic");
    if (act != "dynamic" && act != "static")
      raise<InvalidArgument>("{}: field 'activation_scheme': '{}' is not supported", source, act);
    q.dynamic_activations = act == "dynamic";
    q.ignore = string_list(c, "ignored_layers");
    q.modules_to_not_convert = string_list(c, "modules_to_not_convert");
  } else if (*method == "compressed-tensors") {
    q.method = QuantMethod::kCompressedTensors;
    parse_compressed_tensors(c, q);
  } else {
    raise<InvalidArgument>(
        "{}: field 'quant_method': '{}' is not supported (gptq, awq, fp8, compressed-tensors)",
        source, *method);
  }
  return q;
}

QuantConfig read_quant_config(const Json& config, const std::string& config_source,
                              const std::string& quantize_config_path) {
  if (auto it = config.find("quantization_config"); it != config.end() && !it->is_null()) {
    if (!it->is_object())
      raise<InvalidArgument>("{}: field 'quantization_config' must be an object", config_source);
    return parse_quant_config(*it, config_source + " (quantization_config)");
  }
  const std::string& path = quantize_config_path;
  if (path.empty() || !file_exists(path)) return {};
  Json j = load_json_file(path);
  if (!j.is_object()) raise<InvalidArgument>("{}: expected a JSON object", path);
  // Older GPTQ files name no method.
  if (!j.contains("quant_method")) j["quant_method"] = "gptq";
  return parse_quant_config(j, path);
}

const CtScheme* QuantConfig::ct_scheme(const std::string& module) const {
  for (const std::string& ig : ignore)
    if (target_matches(ig, module)) return nullptr;
  for (const CtScheme& s : ct_schemes)
    for (const std::string& t : s.targets)
      if (t == "Linear" || target_matches(t, module)) return &s;
  return nullptr;
}

bool QuantConfig::quantizes(const std::string& module, bool is_lm_head) const {
  switch (method) {
    case QuantMethod::kNone:
      return false;
    case QuantMethod::kCompressedTensors:
      return ct_scheme(module) != nullptr;
    case QuantMethod::kGptq:
      return !is_lm_head || lm_head;
    case QuantMethod::kAwq:
    case QuantMethod::kFp8:
      for (const std::string& m : modules_to_not_convert)
        if (module.find(m) != std::string::npos) return false;
      for (const std::string& m : ignore)
        if (target_matches(m, module)) return false;
      return !is_lm_head;
  }
  return false;
}

std::string QuantConfig::str() const {
  const std::string g = group_size > 0 ? fmt::format(" g{}", group_size) : " per-channel";
  switch (method) {
    case QuantMethod::kNone:
      return "none";
    case QuantMethod::kGptq:
      return fmt::format("gptq int{}{}{}{} {}", bits, g, sym ? " sym" : "",
                         desc_act ? " act-order" : "", gptq_v1 ? "v1" : "v2");
    case QuantMethod::kAwq:
      return fmt::format("awq int{}{}{} {}", bits, g, zero_point ? "" : " sym",
                         awq_gemv ? "gemv" : "gemm");
    case QuantMethod::kFp8:
      return block_n > 0 ? fmt::format("fp8 block {}x{}", block_n, block_k)
                         : std::string("fp8 per-tensor");
    case QuantMethod::kCompressedTensors:
      return fmt::format("compressed-tensors, {} group(s)", ct_schemes.size());
  }
  return "?";
}

Json QuantConfig::to_json() const {
  Json j;
  j["method"] = std::string(quant_method_name(method));
  j["description"] = str();
  return j;
}

}  // namespace tachyon
