#include "model/lora_config.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/hf_config.h"

namespace tachyon {
namespace {

// PEFT writes its patterns as Python regular expressions; they are compiled here with
// ECMAScript's grammar, which agrees on what LoRA configs use (names, '.', '|', '*',
// character classes, groups). Python-only syntax ((?P<name>...), (?i), \Z, lookbehind)
// is refused as an invalid expression rather than read differently. A pattern key
// matches with std::regex_match (the whole name), where PEFT's "...$" would also
// match before a final newline, which module names never have.
// `shown` is the pattern as the file spells it, for messages (default: `pattern`).
std::regex compile(const std::string& pattern, const std::string& source, std::string_view field,
                   const std::string& shown = {}) {
  if (pattern.size() > 512)
    raise<InvalidArgument>("{}: field '{}': a regular expression of {} characters (at most 512)",
                           source, field, pattern.size());
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error&) {
    raise<InvalidArgument>("{}: field '{}': invalid regular expression '{}'", source, field,
                           shown.empty() ? pattern : shown);
  }
}

// A null / absent field, a string, or a list of strings; "all-linear" is PEFT's word
// for every linear layer in target_modules only.
LoraModuleFilter module_filter(const HfConfig& c, std::string_view field, bool targets) {
  LoraModuleFilter f;
  const Json* v = c.find({field});
  if (v == nullptr) return f;
  f.present = true;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (targets && s == "all-linear")
      f.all_linear = true;
    else
      f.regex = compile(s, c.source(), field);
    return f;
  }
  if (!v->is_array())
    raise<InvalidArgument>("{}: field '{}' must be a list of module names or a string, got {}",
                           c.source(), field, json_type_name(*v));
  for (const Json& x : *v) {
    if (!x.is_string())
      raise<InvalidArgument>("{}: field '{}' must hold strings, got {}", c.source(), field,
                             json_type_name(x));
    f.names.push_back(x.get<std::string>());
  }
  return f;
}

bool ends_with_component(const std::string& name, const std::string& key) {
  return name.size() > key.size() && name.ends_with(key) &&
         name[name.size() - key.size() - 1] == '.';
}

// PEFT's `key in list` / `key.endswith("." + entry)` / `re.fullmatch(string, key)`;
// `layer_check` applies to the suffix form only, as in PEFT (which expands "all-linear"
// into the suffix form).
template <typename LayerCheck>
bool filter_matches(const LoraModuleFilter& f, const std::string& name, LayerCheck&& layer_check) {
  if (f.all_linear) return layer_check();
  if (f.regex) return std::regex_match(name, *f.regex);
  for (const std::string& n : f.names)
    if (n == name) return true;
  for (const std::string& n : f.names)
    if (ends_with_component(name, n)) return layer_check();
  return false;
}

std::vector<LoraConfig::Pattern> patterns(const HfConfig& c, const nlohmann::ordered_json& ordered,
                                          std::string_view field, bool rank) {
  std::vector<LoraConfig::Pattern> out;
  const Json* v = c.find({field});
  if (v == nullptr) return out;
  if (!v->is_object())
    raise<InvalidArgument>("{}: field '{}' must be an object, got {}", c.source(), field,
                           json_type_name(*v));
  // The keys in the file's order (PEFT takes the first that matches), then any the
  // ordered reading missed (a field given twice); the checked values from `v`.
  std::vector<std::string> keys;
  if (auto it = ordered.find(std::string(field)); it != ordered.end() && it->is_object())
    for (const auto& [key, unused] : it->items())
      if (v->contains(key)) keys.push_back(key);
  for (const auto& [key, unused] : v->items()) keys.push_back(key);
  for (const std::string& key : keys) {
    bool seen = false;
    for (const LoraConfig::Pattern& p : out) seen = seen || p.key == key;
    if (seen) continue;
    const Json& x = v->at(key);
    double value = 0;
    if (rank) {
      if (!x.is_number_integer() || x.get<int64_t>() <= 0 ||
          x.get<int64_t>() > std::numeric_limits<int32_t>::max())
        raise<InvalidArgument>("{}: field '{}': '{}' must map to a positive rank, got {}",
                               c.source(), field, key, x.dump());
      value = static_cast<double>(x.get<int64_t>());
    } else {
      if (!x.is_number() || !std::isfinite(x.get<double>()))
        raise<InvalidArgument>("{}: field '{}': '{}' must map to a finite number, got {}",
                               c.source(), field, key, x.dump());
      value = x.get<double>();
    }
    out.push_back({key, compile(fmt::format("(.*\\.)?({})", key), c.source(), field, key), value});
  }
  return out;
}

void require_value(const HfConfig& c, std::string_view field, bool ok, std::string_view why) {
  if (!ok)
    raise<InvalidArgument>("{}: field '{}': {} (got {})", c.source(), field, why,
                           c.find({field})->dump());
}

}  // namespace

LoraConfig parse_lora_config(const std::string& text, const std::string& source) {
  const HfConfig c(parse_json(text, source, 64), source);
  // The text parsed above, so this parse (for the patterns' key order) succeeds too.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
  LoraConfig cfg;
  cfg.source = source;

  const auto type = c.get_string({"peft_type"});
  if (!type) raise<InvalidArgument>("{}: missing field 'peft_type'", source);
  if (*type != "LORA")
    raise<InvalidArgument>("{}: field 'peft_type': '{}' adapters are not supported (LORA)", source,
                           *type);
  cfg.r = c.require_size({"r"});
  if (cfg.r > std::numeric_limits<int32_t>::max())
    raise<InvalidArgument>("{}: field 'r': rank {} is too large", source, cfg.r);
  cfg.alpha = c.get_double({"lora_alpha"}).value_or(8.0);  // PEFT's default
  cfg.rslora = c.bool_or({"use_rslora"}, false);
  cfg.fan_in_fan_out = c.bool_or({"fan_in_fan_out"}, false);
  cfg.rank_pattern = patterns(c, ordered, "rank_pattern", true);
  cfg.alpha_pattern = patterns(c, ordered, "alpha_pattern", false);
  cfg.target = module_filter(c, "target_modules", true);
  cfg.exclude = module_filter(c, "exclude_modules", false);

  if (const Json* v = c.find({"layers_to_transform"})) {
    std::vector<int64_t> layers;
    auto layer = [&](const Json& x) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        raise<InvalidArgument>(
            "{}: field 'layers_to_transform' must be a layer index or a list of them, got {}",
            source, x.dump());
      layers.push_back(x.get<int64_t>());
    };
    if (v->is_array()) {
      for (const Json& x : *v) layer(x);
    } else {
      layer(*v);
    }
    if (!layers.empty()) cfg.layers_to_transform = std::move(layers);
  }
  if (const Json* v = c.find({"layers_pattern"})) {
    std::vector<std::string> names;
    if (v->is_string()) {
      names.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const Json& x : *v) {
        if (!x.is_string())
          raise<InvalidArgument>("{}: field 'layers_pattern' must hold strings, got {}", source,
                                 json_type_name(x));
        names.push_back(x.get<std::string>());
      }
    } else {
      raise<InvalidArgument>("{}: field 'layers_pattern' must be a string or a list, got {}",
                             source, json_type_name(*v));
    }
    for (const std::string& n : names)
      cfg.layers_pattern.push_back(
          compile(fmt::format(".*\\.{}\\.(\\d+)\\.", n), source, "layers_pattern", n));
  }

  // What the decoder would not compute as PEFT does.
  if (c.has({"bias"})) {
    const std::string bias = *c.get_string({"bias"});
    require_value(c, "bias", bias == "none", "trainable biases are not supported ('none')");
  }
  require_value(c, "lora_bias", !c.bool_or({"lora_bias"}, false), "LoRA biases are not supported");
  require_value(c, "use_dora", !c.bool_or({"use_dora"}, false), "DoRA is not supported");
  require_value(c, "use_qalora", !c.bool_or({"use_qalora"}, false), "QALoRA is not supported");
  for (std::string_view field : {"modules_to_save", "trainable_token_indices", "target_parameters"})
    if (const Json* v = c.find({field}))
      require_value(c, field, (v->is_array() || v->is_object()) && v->empty(),
                    "only null or empty is supported");
  for (std::string_view field : {"layer_replication", "alora_invocation_tokens"})
    require_value(c, field, !c.has({field}), "only null is supported");
  return cfg;
}

bool LoraConfig::adapts(const std::string& name) const {
  auto in_layers = [&] {
    if (!layers_to_transform) return true;
    static const std::regex kDefault(R"(.*\.[^.]*\.(\d+)\.)");
    std::smatch m;
    bool found = false;
    if (layers_pattern.empty()) {
      found = std::regex_search(name, m, kDefault, std::regex_constants::match_continuous);
    } else {
      for (const std::regex& re : layers_pattern)
        if ((found = std::regex_search(name, m, re, std::regex_constants::match_continuous))) break;
    }
    if (!found || m[1].length() > 9) return false;
    const int64_t layer = std::stoll(m[1].str());
    for (int64_t l : *layers_to_transform)
      if (l == layer) return true;
    return false;
  };
  if (target.present && !filter_matches(target, name, in_layers)) return false;
  if (!target.present && !in_layers()) return false;
  return !(exclude.present && filter_matches(exclude, name, [] { return true; }));
}

namespace {
const LoraConfig::Pattern* first_match(const std::vector<LoraConfig::Pattern>& list,
                                       const std::string& name) {
  for (const LoraConfig::Pattern& p : list)
    if (std::regex_match(name, p.regex)) return &p;
  return nullptr;
}
}  // namespace

int64_t LoraConfig::rank_of(const std::string& name) const {
  const Pattern* p = first_match(rank_pattern, name);
  return p ? static_cast<int64_t>(p->value) : r;
}

double LoraConfig::scaling_of(const std::string& name) const {
  const Pattern* p = first_match(alpha_pattern, name);
  const double a = p ? p->value : alpha;
  const double rank = static_cast<double>(rank_of(name));
  return rslora ? a / std::sqrt(rank) : a / rank;
}

}  // namespace tachyon
