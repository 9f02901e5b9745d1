// The settings of every `tachyon` subcommand and of the libraries, in one table.
//
// Each setting has a canonical flag (--kv-cache-mb), other accepted spellings (older
// ones and vLLM's), environment variables (TACHYON_* first, then RTP-LLM's names), a
// type with its range or choices, a default, a help line and the subcommands that take
// it. A subcommand's arguments resolve, for each setting, from (highest first):
//   1. its flag: --a-b VALUE, --a-b=VALUE, --a_b VALUE; a boolean also --a-b alone,
//      --a-b true|false (or 1/0, yes/no, on/off) and --no-a-b;
//   2. its environment variables, in the table's order (a list's value is split at
//      commas, unless it is JSON, opening with '{' or '[': then it is one item);
//   3. the --config file (YAML or JSON: a mapping of setting names, spelled like the
//      flags with - or _, to values; TACHYON_CONFIG names it too);
//   4. the default.
// Settings without subcommands are read by the libraries from the environment only
// (thread count, CPU ISA, log level, ...): setting_env() reads a setting's variables
// once per process.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon {

enum class SettingType { kString, kInt, kDouble, kBool, kList, kEnum };

// Another name for a setting: a flag (without "--") or a variable. A value given
// under it is multiplied by `scale` (e.g. bytes for a setting in MiB).
struct SettingName {
  std::string name;
  double scale = 1;
  SettingName(const char* n, double s = 1) : name(n), scale(s) {}  // NOLINT: brace tables
};

struct Setting {
  std::string name;                  // the canonical flag without "--", e.g. "kv-cache-mb"
  std::vector<SettingName> aliases;  // other flag spellings
  std::vector<SettingName> env;      // TACHYON_* first, then RTP-LLM's
  SettingType type = SettingType::kString;
  double min = 0, max = 0;           // kInt, kDouble
  std::vector<std::string> choices;  // kEnum
  std::string default_value;         // as text; empty: none (the setting is unset)
  std::string help;
  std::vector<std::string> commands;  // subcommands that take it; none: environment only
  // kList: the flag takes every argument after it up to the next flag (--a x y), as
  // well as one value per repetition.
  bool multi_value = false;
  // Defaults that differ by subcommand: (command, default).
  std::vector<std::pair<std::string, std::string>> command_defaults;

  bool takes(std::string_view command) const;
  std::string default_for(std::string_view command) const;
};

// Every setting (core/settings_table.cc).
const std::vector<Setting>& settings_table();
// The setting with this canonical name; throws Internal when there is none.
const Setting& find_setting(std::string_view name);
// The subcommands with their one-line descriptions, in display order.
const std::vector<std::pair<std::string, std::string>>& subcommands();

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// The process environment (unset and empty variables are absent).
std::optional<std::string> process_env(const std::string& name);

// The resolved settings of one subcommand.
class SettingValues {
 public:
  struct Value {
    std::vector<std::string> items;  // one item, or several for kList
    std::string source;              // "--flag", the variable or "--config FILE: key"
  };

  explicit SettingValues(std::string command = {}) : command_(std::move(command)) {}
  const std::string& command() const { return command_; }

  // Set by a flag, a variable or the config file (not from the default).
  bool given(std::string_view name) const;
  // Given or with a default.
  bool has(std::string_view name) const;
  // The value (given, else the default); throws InvalidArgument naming the flag when
  // the setting has neither (a required setting).
  std::string str(std::string_view name) const;
  int64_t integer(std::string_view name) const;
  double number(std::string_view name) const;
  bool flag(std::string_view name) const;
  std::vector<std::string> list(std::string_view name) const;
  // Where the value came from ("default" when not given).
  std::string source(std::string_view name) const;

  void set(const std::string& name, Value v) { values_[name] = std::move(v); }

 private:
  const Setting& checked(std::string_view name) const;
  std::string command_;
  std::map<std::string, Value, std::less<>> values_;
};

// Resolves `command`'s settings from its arguments, the environment and the config
// file. Throws InvalidArgument on an unknown flag (naming the nearest known one), a
// missing or malformed value, a value out of range, a stray argument, or a bad config
// file. Returns nullopt when --help or -h was given.
std::optional<SettingValues> parse_settings(std::string_view command,
                                            const std::vector<std::string>& args,
                                            const EnvLookup& env = process_env);

// `tachyon COMMAND --help`: the usage line, then every setting the command takes with
// its spellings, variables and default. `tachyon --help`: the subcommands and the
// settings read from the environment only.
std::string settings_help(std::string_view command, std::string_view usage);
std::string main_help();

// Parses one value of `s` as its type (after scaling by `scale` for numbers) and
// checks its range or choices; `what` names the source in the error. Returns the
// canonical text (e.g. "true" for "on").
std::string check_setting_value(const Setting& s, const std::string& value, const std::string& what,
                                double scale = 1);

// The nearest known flag of `command` to `flag` (for "did you mean"); empty when none
// is close.
std::string nearest_flag(std::string_view command, std::string_view flag);

// A library setting from the environment: the first of its variables that is set,
// read once per process (later changes to the environment are not seen).
std::optional<std::string> setting_env(std::string_view name);
// The same, parsed as the setting's type; the default when unset. Throws
// InvalidArgument naming the variable on a malformed value.
int64_t setting_env_int(std::string_view name);
bool setting_env_bool(std::string_view name);
std::string setting_env_str(std::string_view name);

}  // namespace tachyon
