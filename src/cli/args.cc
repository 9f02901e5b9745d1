#include "cli/args.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace tachyon::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
           const std::set<std::string>& bool_flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) raise<InvalidArgument>("unexpected argument '{}'", a);
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name)) {
      if (value) raise<InvalidArgument>("flag --{} takes no value", name);
      values_.emplace(name, "1");
    } else if (value_flags.count(name)) {
      if (!value) {
        if (i + 1 >= argv.size()) raise<InvalidArgument>("flag --{} needs a value", name);
        value = argv[++i];
      }
      values_.emplace(name, *value);
    } else {
      raise<InvalidArgument>("unknown flag --{}", name);
    }
  }
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto range = values_.equal_range(name);
  if (range.first == range.second) return std::nullopt;
  return std::prev(range.second)->second;  // the last one wins
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  auto v = get(name);
  return v ? *v : fallback;
}

std::string Args::get_env_or(const std::string& name, const char* env,
                             const std::string& fallback) const {
  if (auto v = get(name)) return *v;
  if (env != nullptr) {
    if (const char* e = std::getenv(env); e != nullptr && *e != '\0') return e;
  }
  return fallback;
}

std::string Args::require(const std::string& name) const {
  auto v = get(name);
  if (!v) raise<InvalidArgument>("missing required flag --{}", name);
  return *v;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto v = get(name);
  return v ? parse_int(*v, "--" + name) : fallback;
}

double Args::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  return v ? parse_double(*v, "--" + name) : fallback;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

int64_t parse_int(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0')
    raise<InvalidArgument>("{}: '{}' is not an integer", what, text);
  return v;
}

double parse_double(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0')
    raise<InvalidArgument>("{}: '{}' is not a number", what, text);
  return v;
}

}  // namespace tachyon::cli
