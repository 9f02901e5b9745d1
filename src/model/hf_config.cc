#include "model/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/logging.h"
#include "core/mmap.h"

namespace tachyon {

HfConfig::HfConfig(Json json, std::string source)
    : json_(std::move(json)), source_(std::move(source)) {
  if (!json_.is_object()) raise<InvalidArgument>("{}: expected a JSON object", source_);
}

HfConfig HfConfig::load(const std::string& path) {
  return HfConfig(load_json_file(path), path);
}

const Json* HfConfig::find(FieldNames names) const {
  for (std::string_view n : names) {
    auto it = json_.find(std::string(n));
    if (it != json_.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

std::string HfConfig::field_list(FieldNames names) const {
  std::string s;
  for (std::string_view n : names) {
    if (!s.empty()) s += "' / '";
    s += n;
  }
  return "'" + s + "'";
}

namespace {
// The name actually present (for messages), else the first name.
std::string present_name(const Json& json, FieldNames names) {
  for (std::string_view n : names) {
    auto it = json.find(std::string(n));
    if (it != json.end() && !it->is_null()) return std::string(n);
  }
  return std::string(*names.begin());
}
}  // namespace

std::optional<int64_t> HfConfig::get_int(FieldNames names) const {
  const Json* v = find(names);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e18)
      return static_cast<int64_t>(d);
  }
  raise<InvalidArgument>("{}: field '{}' must be an integer, got {}", source_,
                         present_name(json_, names), v->dump());
}

std::optional<double> HfConfig::get_double(FieldNames names) const {
  const Json* v = find(names);
  if (v == nullptr) return std::nullopt;
  if (v->is_number()) {
    double d = v->get<double>();
    if (std::isfinite(d)) return d;
  }
  raise<InvalidArgument>("{}: field '{}' must be a finite number, got {}", source_,
                         present_name(json_, names), v->dump());
}

std::optional<bool> HfConfig::get_bool(FieldNames names) const {
  const Json* v = find(names);
  if (v == nullptr) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  raise<InvalidArgument>("{}: field '{}' must be true or false, got {}", source_,
                         present_name(json_, names), v->dump());
}

std::optional<std::string> HfConfig::get_string(FieldNames names) const {
  const Json* v = find(names);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  raise<InvalidArgument>("{}: field '{}' must be a string, got {}", source_,
                         present_name(json_, names), v->dump());
}

int64_t HfConfig::require_size(FieldNames names, bool allow_zero) const {
  auto v = get_int(names);
  if (!v) raise<InvalidArgument>("{}: missing required field {}", source_, field_list(names));
  if (*v < 0 || (*v == 0 && !allow_zero))
    raise<InvalidArgument>("{}: field '{}' must be {}, got {}", source_, present_name(json_, names),
                           allow_zero ? "non-negative" : "positive", *v);
  return *v;
}

int64_t HfConfig::size_or(FieldNames names, int64_t fallback, bool allow_zero) const {
  if (!has(names)) return fallback;
  return require_size(names, allow_zero);
}

HfConfig HfConfig::sub(std::string_view name) const {
  const Json* v = find({name});
  if (v == nullptr) return HfConfig(Json::object(), fmt::format("{} ({})", source_, name));
  if (!v->is_object()) raise<InvalidArgument>("{}: field '{}' must be an object", source_, name);
  return HfConfig(*v, fmt::format("{} ({})", source_, name));
}

int32_t to_i32(int64_t v, std::string_view field) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    raise<InvalidArgument>("field '{}' is out of range: {}", field, v);
  return static_cast<int32_t>(v);
}

Activation parse_activation(const std::string& name, const HfConfig& cfg, std::string_view field) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu" || name == "gelu_python" || name == "gelu_accurate_erf")
    return Activation::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast" ||
      name == "gelu_tanh" || name == "gelu_accurate")
    return Activation::kGeluTanh;
  if (name == "relu") return Activation::kRelu;
  if (name == "quick_gelu") return Activation::kQuickGelu;
  raise<InvalidArgument>("{}: field '{}': unsupported activation '{}'", cfg.source(), field, name);
}

namespace {

std::vector<int64_t> read_token_ids(const Json& v, const std::string& source,
                                    std::string_view field) {
  std::vector<int64_t> ids;
  auto one = [&](const Json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      raise<InvalidArgument>("{}: field '{}' must hold non-negative token ids, got {}", source,
                             field, x.dump());
    ids.push_back(x.get<int64_t>());
  };
  if (v.is_array()) {
    for (const Json& x : v) one(x);
  } else {
    one(v);
  }
  return ids;
}

std::optional<int64_t> read_token_id(const HfConfig& cfg, std::string_view field) {
  const Json* v = cfg.find({field});
  if (v == nullptr) return std::nullopt;
  auto ids = read_token_ids(*v, cfg.source(), field);
  if (ids.empty()) return std::nullopt;
  return ids.front();
}

}  // namespace

void read_common(const HfConfig& cfg, ModelConfig& mc, bool tie_default) {
  if (const Json* eos = cfg.find({"eos_token_id"}))
    mc.eos_token_ids = read_token_ids(*eos, cfg.source(), "eos_token_id");
  mc.bos_token_id = read_token_id(cfg, "bos_token_id");
  mc.pad_token_id = read_token_id(cfg, "pad_token_id");
  if (auto dt = cfg.get_string({"torch_dtype", "dtype"})) {
    // Informational (each tensor carries its own dtype): an unknown spelling is noted,
    // not fatal; unsupported weights are refused when they are loaded.
    auto parsed = parse_dtype(*dt);
    if (parsed && (*parsed == DType::kF32 || *parsed == DType::kF16 || *parsed == DType::kBF16)) {
      mc.dtype = *parsed;
    } else {
      log_warning("{}: field 'torch_dtype' / 'dtype' = '{}' is not f32/f16/bf16; ignored",
                  cfg.source(), *dt);
    }
  }
  mc.tie_word_embeddings = cfg.bool_or({"tie_word_embeddings"}, tie_default);
}

int32_t head_dim_of(const HfConfig& cfg, int64_t hidden, int64_t heads,
                    std::string_view hidden_field, std::string_view heads_field,
                    FieldNames head_dim_names) {
  if (cfg.has(head_dim_names)) return to_i32(cfg.require_size(head_dim_names), "head_dim");
  if (heads <= 0)
    raise<InvalidArgument>("{}: field '{}' must be positive", cfg.source(), heads_field);
  if (hidden % heads != 0)
    raise<InvalidArgument>(
        "{}: field '{}' ({}) is not divisible by field '{}' ({}) and no head_dim is given",
        cfg.source(), hidden_field, hidden, heads_field, heads);
  return to_i32(hidden / heads, "head_dim");
}

bool read_layer_types(const HfConfig& cfg, ModelConfig& mc) {
  const Json* lt = cfg.find({"layer_types"});
  if (lt == nullptr) return false;
  if (!lt->is_array() || lt->size() != static_cast<size_t>(mc.layer_num))
    raise<InvalidArgument>("{}: field 'layer_types' must list {} layer types", cfg.source(),
                           mc.layer_num);
  mc.layer_sliding.assign(static_cast<size_t>(mc.layer_num), 0);
  for (size_t i = 0; i < lt->size(); ++i) {
    const Json& t = (*lt)[i];
    std::string s = t.is_string() ? t.get<std::string>() : std::string();
    if (s == "sliding_attention") {
      mc.layer_sliding[i] = 1;
    } else if (s != "full_attention") {
      raise<InvalidArgument>("{}: field 'layer_types' entry {}: unsupported layer type {}",
                             cfg.source(), i, t.dump());
    }
  }
  return true;
}

namespace {

std::vector<double> read_factor_list(const HfConfig& d, std::string_view name, int32_t want) {
  const Json* v = d.find({name});
  if (v == nullptr || !v->is_array())
    raise<InvalidArgument>("{}: field '{}' must be a list of {} numbers", d.source(), name, want);
  std::vector<double> out;
  for (const Json& x : *v) {
    if (!x.is_number() || !(x.get<double>() > 0))
      raise<InvalidArgument>("{}: field '{}' must hold positive numbers", d.source(), name);
    out.push_back(x.get<double>());
  }
  if (static_cast<int32_t>(out.size()) != want)
    raise<InvalidArgument>("{}: field '{}' has {} entries, expected {} (rotary dims / 2)",
                           d.source(), name, out.size(), want);
  return out;
}

}  // namespace

void read_rope(const HfConfig& cfg, ModelConfig& mc, double theta_default, double default_partial,
               std::initializer_list<std::string_view> theta_names) {
  const Json* params = cfg.find({"rope_parameters"});
  const Json* scaling = cfg.find({"rope_scaling"});
  std::string spelling = "rope_parameters";
  Json dict = Json::object();
  if (params != nullptr) {
    if (!params->is_object())
      raise<InvalidArgument>("{}: field 'rope_parameters' must be an object", cfg.source());
    dict = *params;
  } else if (scaling != nullptr) {
    if (!scaling->is_object())
      raise<InvalidArgument>("{}: field 'rope_scaling' must be an object", cfg.source());
    dict = *scaling;
    spelling = "rope_scaling";
  }
  if (dict.contains("full_attention") || dict.contains("sliding_attention"))
    raise<InvalidArgument>("{}: per-layer-type '{}' are not supported", cfg.source(), spelling);
  HfConfig d(dict, cfg.source() + " (" + spelling + ")");

  RopeConfig& r = mc.rope;
  r.theta = d.get_double({"rope_theta"}).value_or(cfg.double_or(theta_names, theta_default));
  if (!(r.theta > 1.0))
    raise<InvalidArgument>("{}: rope_theta must be > 1, got {}", cfg.source(), r.theta);
  double partial = d.get_double({"partial_rotary_factor"})
                       .value_or(cfg.double_or({"partial_rotary_factor"}, default_partial));
  if (!(partial > 0 && partial <= 1))
    raise<InvalidArgument>("{}: field 'partial_rotary_factor' must be in (0, 1], got {}",
                           cfg.source(), partial);
  r.dim = static_cast<int32_t>(static_cast<double>(mc.size_per_head) * partial);
  if (r.dim <= 0 || r.dim % 2 != 0)
    raise<InvalidArgument>(
        "{}: rotary dims {} (head_dim {} x partial_rotary_factor {}) must be even and positive",
        cfg.source(), r.dim, mc.size_per_head, partial);
  r.max_position_embeddings = mc.max_seq_len;

  std::string type = d.get_string({"rope_type", "type"}).value_or("default");
  auto need_factor = [&]() {
    auto f = d.get_double({"factor"});
    if (!f) raise<InvalidArgument>("{}: rope type '{}' needs field 'factor'", d.source(), type);
    if (!(*f > 0))
      raise<InvalidArgument>("{}: field 'factor' must be positive, got {}", d.source(), *f);
    return *f;
  };
  auto original_max = [&]() {
    int64_t v =
        cfg.get_int({"original_max_position_embeddings"})
            .value_or(d.get_int({"original_max_position_embeddings"}).value_or(mc.max_seq_len));
    if (v <= 0)
      raise<InvalidArgument>("{}: field 'original_max_position_embeddings' must be positive",
                             d.source());
    return v;
  };
  if (type == "default") {
    r.type = RopeType::kDefault;
  } else if (type == "linear" || type == "dynamic") {
    // Both stretch max_position_embeddings by the factor: the model then takes
    // sequences of max_position_embeddings * factor tokens.
    r.type = type == "linear" ? RopeType::kLinear : RopeType::kDynamic;
    r.factor = need_factor();
    if (r.factor > 1) {
      // Computed in double and bounded before the conversion (a huge factor would make it
      // undefined); ModelConfig::validate() then names the field if it is past 32 bits.
      const double stretched = static_cast<double>(mc.max_seq_len) * r.factor;
      mc.max_seq_len = stretched < 0x1p62 ? static_cast<int64_t>(stretched) : int64_t{1} << 62;
    }
  } else if (type == "llama3") {
    r.type = RopeType::kLlama3;
    r.factor = need_factor();
    r.original_max_position = original_max();
    auto lo = d.get_double({"low_freq_factor"}), hi = d.get_double({"high_freq_factor"});
    if (!lo || !hi)
      raise<InvalidArgument>(
          "{}: rope type 'llama3' needs 'low_freq_factor' and 'high_freq_factor'", d.source());
    if (!(*hi > *lo))
      raise<InvalidArgument>("{}: 'high_freq_factor' must exceed 'low_freq_factor'", d.source());
    r.low_freq_factor = *lo;
    r.high_freq_factor = *hi;
  } else if (type == "yarn") {
    r.type = RopeType::kYarn;
    r.original_max_position = original_max();
    auto f = d.get_double({"factor"});
    r.factor =
        f ? *f : static_cast<double>(mc.max_seq_len) / static_cast<double>(r.original_max_position);
    if (!(r.factor > 0)) raise<InvalidArgument>("{}: field 'factor' must be positive", d.source());
    r.attention_factor = d.get_double({"attention_factor"});
    r.beta_fast = d.double_or({"beta_fast"}, 32.0);
    r.beta_slow = d.double_or({"beta_slow"}, 1.0);
    r.mscale = d.double_or({"mscale"}, 0.0);
    r.mscale_all_dim = d.double_or({"mscale_all_dim"}, 0.0);
    r.truncate = d.bool_or({"truncate"}, true);
  } else if (type == "longrope" || type == "su") {
    r.type = RopeType::kLongrope;
    r.original_max_position = original_max();
    r.short_factor = read_factor_list(d, "short_factor", r.dim / 2);
    r.long_factor = read_factor_list(d, "long_factor", r.dim / 2);
    auto f = d.get_double({"factor"});
    r.factor =
        f ? *f : static_cast<double>(mc.max_seq_len) / static_cast<double>(r.original_max_position);
    r.attention_factor = d.get_double({"attention_factor"});
  } else {
    raise<InvalidArgument>(
        "{}: unsupported rope type '{}' (supported: default, linear, dynamic, yarn, longrope, "
        "llama3)",
        d.source(), type);
  }
}

namespace {
template <typename T>
std::vector<T> read_layer_list(const HfConfig& cfg, std::string_view field, int32_t layer_num) {
  const Json* v = cfg.find({field});
  if (v == nullptr) return {};
  if (!v->is_array())
    raise<InvalidArgument>("{}: field '{}' must be a list of {} per-layer sizes, got {}",
                           cfg.source(), field, layer_num, v->dump());
  if (static_cast<int64_t>(v->size()) != layer_num)
    raise<InvalidArgument>("{}: field '{}' has {} entries; the model has {} layers", cfg.source(),
                           field, v->size(), layer_num);
  std::vector<T> out;
  for (size_t l = 0; l < v->size(); ++l) {
    const Json& e = (*v)[l];
    const bool integral =
        e.is_number_integer() || (e.is_number_float() && std::isfinite(e.get<double>()) &&
                                  e.get<double>() == std::floor(e.get<double>()));
    const double d = integral ? e.get<double>() : -1;
    if (!integral || d < 0 || d > std::numeric_limits<int32_t>::max())
      raise<InvalidArgument>(
          "{}: field '{}' entry {} (layer {}) must be a non-negative size, got {}", cfg.source(),
          field, l, l, e.dump());
    out.push_back(static_cast<T>(d));
  }
  return out;
}
}  // namespace

void read_layer_shapes(const HfConfig& cfg, const std::string& sparse_config_path,
                       ModelConfig& mc) {
  const bool from_file = !sparse_config_path.empty();
  if (from_file && !file_exists(sparse_config_path))
    raise<NotFound>("sparse config file '{}' does not exist", sparse_config_path);
  const HfConfig src = from_file ? HfConfig::load(sparse_config_path) : cfg;
  const FieldNames lists = {"layer_head_num", "layer_head_num_kv", "layer_inter_size"};
  if (!src.has(lists)) {
    if (from_file)
      raise<InvalidArgument>(
          "{}: none of 'layer_head_num', 'layer_head_num_kv', "
          "'layer_inter_size' (a sparse config names per-layer sizes)",
          src.source());
    return;
  }
  if (auto n = src.get_int({"layer_num"}); n && *n != mc.layer_num)
    raise<InvalidArgument>("{}: layer_num {} differs from the model's {} layers", src.source(), *n,
                           mc.layer_num);
  mc.layer_head_num = read_layer_list<int32_t>(src, "layer_head_num", mc.layer_num);
  mc.layer_head_num_kv = read_layer_list<int32_t>(src, "layer_head_num_kv", mc.layer_num);
  mc.layer_inter_size = read_layer_list<int64_t>(src, "layer_inter_size", mc.layer_num);
  for (int l = 0; l < mc.layer_num; ++l) {
    const int32_t h = mc.heads(l), kv = mc.kv_heads(l);
    if ((h == 0) != (kv == 0) || (kv > 0 && h % kv != 0))
      raise<InvalidArgument>(
          "{}: layer {} has {} heads and {} KV heads; the KV heads must divide the heads (0 "
          "only with 0 heads)",
          src.source(), l, h, kv);
  }
}

void apply_generation_config(const std::string& path, ModelConfig& mc) {
  if (!file_exists(path)) return;
  HfConfig g = HfConfig::load(path);
  if (const Json* eos = g.find({"eos_token_id"}))
    mc.eos_token_ids = read_token_ids(*eos, g.source(), "eos_token_id");
  if (auto bos = read_token_id(g, "bos_token_id")) mc.bos_token_id = bos;
  if (auto pad = read_token_id(g, "pad_token_id")) mc.pad_token_id = pad;
  GenerationDefaults& gd = mc.generation;
  gd.temperature = g.get_double({"temperature"});
  gd.top_p = g.get_double({"top_p"});
  gd.top_k = g.get_int({"top_k"});
  gd.repetition_penalty = g.get_double({"repetition_penalty"});
  gd.max_new_tokens = g.get_int({"max_new_tokens"});
  gd.do_sample = g.get_bool({"do_sample"});
}

}  // namespace tachyon
