#include "core/settings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/settings_file.h"

namespace tachyon {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::optional<bool> bool_word(const std::string& v) {
  const std::string s = lower(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return std::nullopt;
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string item =
        v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// A list's items from one value of the environment or the config file: split at commas,
// or one item when the value is JSON (an object or array holds commas of its own).
std::vector<std::string> list_items(const std::string& v) {
  const size_t first = v.find_first_not_of(" \t\n\r");
  if (first != std::string::npos && (v[first] == '{' || v[first] == '[')) return {v};
  return split_list(v);
}

std::string normalized(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// A flag or config key of `command` resolved to its setting.
struct Resolved {
  const Setting* setting = nullptr;
  double scale = 1;
};

Resolved resolve(std::string_view command, const std::string& name) {
  for (const Setting& s : settings_table())
    if (s.takes(command) && s.name == name) return {&s, 1};
  for (const Setting& s : settings_table())
    if (s.takes(command))
      for (const SettingName& a : s.aliases)
        if (a.name == name) return {&s, a.scale};
  return {};
}

bool known_command(std::string_view command) {
  for (const Setting& s : settings_table())
    if (s.takes(command)) return true;
  return false;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

[[noreturn]] void unknown_flag(std::string_view command, const std::string& flag) {
  const std::string near = nearest_flag(command, flag);
  if (near.empty()) raise<InvalidArgument>("unknown flag --{} for '{}'", flag, command);
  raise<InvalidArgument>("unknown flag --{} for '{}' (did you mean --{}?)", flag, command, near);
}

std::string config_source(const std::string& path, const std::string& key) {
  return "--config " + path + ": " + key;
}

}  // namespace

bool Setting::takes(std::string_view command) const {
  return std::find(commands.begin(), commands.end(), command) != commands.end();
}

std::string Setting::default_for(std::string_view command) const {
  for (const auto& [cmd, def] : command_defaults)
    if (cmd == command) return def;
  return default_value;
}

const Setting& find_setting(std::string_view name) {
  for (const Setting& s : settings_table())
    if (s.name == name) return s;
  raise<Internal>("no setting named '{}'", name);
}

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string check_setting_value(const Setting& s, const std::string& value, const std::string& what,
                                double scale) {
  switch (s.type) {
    case SettingType::kString:
    case SettingType::kList:
      return value;
    case SettingType::kBool: {
      auto b = bool_word(value);
      if (!b) raise<InvalidArgument>("{}: '{}' is not a boolean (true/false)", what, value);
      return *b ? "true" : "false";
    }
    case SettingType::kEnum:
      if (std::find(s.choices.begin(), s.choices.end(), value) == s.choices.end()) {
        std::string all;
        for (const auto& c : s.choices) all += (all.empty() ? "" : ", ") + c;
        raise<InvalidArgument>("{}: '{}' is not one of {}", what, value, all);
      }
      return value;
    case SettingType::kInt:
    case SettingType::kDouble:
      break;
  }
  const bool blank_start = value.empty() || std::isspace(static_cast<unsigned char>(value[0]));
  errno = 0;
  char* end = nullptr;
  if (s.type == SettingType::kInt && scale == 1) {
    const long long x = std::strtoll(value.c_str(), &end, 10);
    if (blank_start || errno != 0 || *end != '\0')
      raise<InvalidArgument>("{}: '{}' is not an integer", what, value);
    if (static_cast<double>(x) < s.min || static_cast<double>(x) > s.max)
      raise<InvalidArgument>("{}: {} is out of range [{}, {}]", what, x,
                             static_cast<int64_t>(s.min), static_cast<int64_t>(s.max));
    return std::to_string(x);
  }
  const double x = std::strtod(value.c_str(), &end) * scale;
  if (blank_start || errno != 0 || *end != '\0' || !std::isfinite(x))
    raise<InvalidArgument>("{}: '{}' is not a number", what, value);
  if (x < s.min || x > s.max) {
    if (scale != 1)
      raise<InvalidArgument>("{}: {} ({} in --{}) is out of range [{}, {}]", what, value, x, s.name,
                             s.min, s.max);
    raise<InvalidArgument>("{}: {} is out of range [{}, {}]", what, x, s.min, s.max);
  }
  if (s.type == SettingType::kInt) {
    if (x != std::floor(x)) raise<InvalidArgument>("{}: '{}' is not an integer", what, value);
    return std::to_string(static_cast<int64_t>(x));
  }
  return fmt::format("{}", x);
}

std::string nearest_flag(std::string_view command, std::string_view flag) {
  std::string best;
  size_t best_d = SIZE_MAX;
  auto consider = [&](const std::string& name) {
    size_t d = edit_distance(flag, name);
    if (name.rfind(flag, 0) == 0 && !flag.empty()) d = std::min<size_t>(d, 1);  // a prefix
    if (d < best_d) best_d = d, best = name;
  };
  for (const Setting& s : settings_table()) {
    if (!s.takes(command)) continue;
    consider(s.name);
    for (const SettingName& a : s.aliases) consider(a.name);
  }
  return best_d <= std::max<size_t>(2, flag.size() / 3) ? best : std::string();
}

// ---- SettingValues -------------------------------------------------------------------

const Setting& SettingValues::checked(std::string_view name) const {
  const Setting& s = find_setting(name);
  if (!s.takes(command_) && !command_.empty())
    raise<Internal>("'{}' does not take the setting '{}'", command_, name);
  return s;
}

bool SettingValues::given(std::string_view name) const {
  checked(name);
  return values_.count(name) > 0;
}

bool SettingValues::has(std::string_view name) const {
  return given(name) || !checked(name).default_for(command_).empty();
}

std::string SettingValues::str(std::string_view name) const {
  const Setting& s = checked(name);
  if (auto it = values_.find(name); it != values_.end()) return it->second.items.back();
  const std::string def = s.default_for(command_);
  if (def.empty() && s.type != SettingType::kString)
    raise<InvalidArgument>("missing required flag --{}", name);
  return def;
}

int64_t SettingValues::integer(std::string_view name) const {
  return std::stoll(str(name));
}

double SettingValues::number(std::string_view name) const {
  return std::stod(str(name));
}

bool SettingValues::flag(std::string_view name) const {
  return str(name) == "true";
}

std::vector<std::string> SettingValues::list(std::string_view name) const {
  const Setting& s = checked(name);
  if (auto it = values_.find(name); it != values_.end()) return it->second.items;
  return split_list(s.default_for(command_));
}

std::string SettingValues::source(std::string_view name) const {
  checked(name);
  auto it = values_.find(name);
  return it == values_.end() ? "default" : it->second.source;
}

// ---- parsing -------------------------------------------------------------------------

std::optional<SettingValues> parse_settings(std::string_view command,
                                            const std::vector<std::string>& args,
                                            const EnvLookup& env) {
  if (!known_command(command)) raise<Internal>("no settings for the command '{}'", command);
  SettingValues out{std::string(command)};
  std::map<std::string, SettingValues::Value> flags;
  // --help wins over everything else, bad flags included.
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return std::nullopt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2)
      raise<InvalidArgument>("unexpected argument '{}'", a);
    std::string spelled = a.substr(2);
    std::optional<std::string> value;
    if (auto eq = spelled.find('='); eq != std::string::npos) {
      value = spelled.substr(eq + 1);
      spelled = spelled.substr(0, eq);
    }
    const std::string name = normalized(spelled);
    Resolved r = resolve(command, name);
    bool negated = false;
    if (r.setting == nullptr && name.rfind("no-", 0) == 0) {
      r = resolve(command, name.substr(3));
      negated = r.setting != nullptr && r.setting->type == SettingType::kBool;
      if (!negated) r = {};
    }
    if (r.setting == nullptr) unknown_flag(command, spelled);
    const Setting& s = *r.setting;
    const std::string what = "--" + spelled;
    if (negated) {
      if (value) raise<InvalidArgument>("flag {} takes no value", what);
      value = "false";
    } else if (!value && s.type == SettingType::kBool) {
      // "--json" alone, or followed by a boolean word ("--progress false").
      value = "true";
      if (i + 1 < args.size() && bool_word(args[i + 1])) value = args[++i];
    } else if (!value) {
      if (i + 1 >= args.size()) raise<InvalidArgument>("flag {} needs a value", what);
      value = args[++i];
    }
    const bool spelled_inline = a.find('=') != std::string::npos;
    const std::string v = check_setting_value(s, *value, what, r.scale);
    SettingValues::Value& slot = flags[s.name];
    if (s.type != SettingType::kList) slot.items.clear();  // the last one wins
    slot.items.push_back(v);
    slot.source = what;
    // "--lora-modules a=/x b=/y": the values up to the next flag.
    if (s.type == SettingType::kList && s.multi_value && !spelled_inline)
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        slot.items.push_back(check_setting_value(s, args[++i], what, r.scale));
  }
  for (auto& [name, v] : flags) out.set(name, std::move(v));

  // The environment, for the settings no flag gave.
  for (const Setting& s : settings_table()) {
    if (!s.takes(command) || out.given(s.name)) continue;
    for (const SettingName& var : s.env) {
      auto raw = env(var.name);
      if (!raw) continue;
      SettingValues::Value v;
      v.source = var.name;
      if (s.type == SettingType::kList) {
        v.items = list_items(*raw);
      } else {
        v.items.push_back(check_setting_value(s, *raw, var.name, var.scale));
      }
      out.set(s.name, std::move(v));
      break;
    }
  }

  // The config file, for the settings neither gave.
  const Setting& config = find_setting("config");
  if (!config.takes(command) || !out.given("config")) return out;
  const std::string path = out.str("config");
  for (const auto& [key, items] : read_settings_file(path)) {
    const std::string what = config_source(path, key);
    Resolved r = resolve(command, normalized(key));
    if (r.setting == nullptr || r.setting->name == "config")
      raise<InvalidArgument>("{}: unknown setting for '{}'", what, command);
    const Setting& s = *r.setting;
    if (out.given(s.name)) continue;
    SettingValues::Value v;
    v.source = what;
    if (s.type == SettingType::kList) {
      for (const auto& item : items) {
        auto parts = items.size() == 1 ? list_items(item) : std::vector<std::string>{item};
        v.items.insert(v.items.end(), parts.begin(), parts.end());
      }
    } else {
      if (items.size() != 1) raise<InvalidArgument>("{}: expected a single value", what);
      v.items.push_back(check_setting_value(s, items[0], what, r.scale));
    }
    out.set(s.name, std::move(v));
  }
  return out;
}

// ---- the libraries' settings from the environment ------------------------------------

namespace {

struct EnvValue {
  std::string var, raw;
  double scale = 1;
};

std::optional<EnvValue> cached_env(std::string_view name) {
  static std::mutex mu;
  static std::map<std::string, std::optional<EnvValue>, std::less<>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  std::optional<EnvValue> found;
  for (const SettingName& var : find_setting(name).env)
    if (auto v = process_env(var.name)) {
      found = EnvValue{var.name, *v, var.scale};
      break;
    }
  cache.emplace(std::string(name), found);
  return found;
}

std::string env_checked(std::string_view name) {
  const Setting& s = find_setting(name);
  auto v = cached_env(name);
  if (!v) return s.default_value;
  return check_setting_value(s, v->raw, v->var, v->scale);
}

}  // namespace

std::optional<std::string> setting_env(std::string_view name) {
  auto v = cached_env(name);
  if (!v) return std::nullopt;
  return v->raw;
}

int64_t setting_env_int(std::string_view name) {
  return std::stoll(env_checked(name));
}

bool setting_env_bool(std::string_view name) {
  return env_checked(name) == "true";
}

std::string setting_env_str(std::string_view name) {
  return env_checked(name);
}

}  // namespace tachyon
