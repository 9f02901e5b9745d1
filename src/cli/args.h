// Command-line flags: `--name value`, `--name=value` and boolean `--name`.
// Every flag a command reads must be declared; an unknown flag is an error.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tachyon::cli {

class Args {
 public:
  // `value_flags` take a value, `bool_flags` do not. Throws InvalidArgument on an
  // unknown flag, a missing value, or a stray positional argument.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
       const std::set<std::string>& bool_flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool flag(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  // The flag's value, or the environment variable's, or the fallback.
  std::string get_env_or(const std::string& name, const char* env,
                         const std::string& fallback) const;
  std::string require(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  // Values of a flag given several times.
  std::vector<std::string> get_all(const std::string& name) const;

 private:
  std::multimap<std::string, std::string> values_;
};

int64_t parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);

}  // namespace tachyon::cli
