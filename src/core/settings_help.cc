// The --help texts built from the settings table.
#include <fmt/format.h>

#include "core/settings.h"

namespace tachyon {
namespace {

std::string metavar(const Setting& s) {
  switch (s.type) {
    case SettingType::kString:
      return " TEXT";
    case SettingType::kInt:
      return " N";
    case SettingType::kDouble:
      return " X";
    case SettingType::kBool:
      return "";
    case SettingType::kList:
      return s.multi_value ? " VALUE..." : " VALUE";
    case SettingType::kEnum: {
      std::string all;
      for (const auto& c : s.choices) all += (all.empty() ? "" : "|") + c;
      return " " + all;
    }
  }
  return "";
}

// "also --x; env A, B; default D".
std::string details(const Setting& s, std::string_view command) {
  std::string out;
  for (const SettingName& a : s.aliases) {
    // An alias another setting of the command owns as its own name is not this one's.
    bool owned = false;
    for (const Setting& o : settings_table())
      owned = owned || (&o != &s && o.takes(command) && o.name == a.name);
    if (owned) continue;
    out += (out.empty() ? "also --" : ", --") + a.name;
    if (a.scale != 1) out += fmt::format(" (value/{})", 1 / a.scale);
  }
  std::string vars;
  for (const SettingName& v : s.env) vars += (vars.empty() ? "" : ", ") + v.name;
  if (!vars.empty()) out += (out.empty() ? "env " : "; env ") + vars;
  const std::string def = s.default_for(command);
  out += (out.empty() ? "default " : "; default ") + (def.empty() ? "none" : def);
  return out;
}

std::string line(const Setting& s, std::string_view command) {
  std::string flag = s.type == SettingType::kBool ? "--[no-]" + s.name : "--" + s.name;
  flag += metavar(s);
  if (flag.size() > 32) flag += "\n  " + std::string(32, ' ');
  return fmt::format("  {:<32} {}\n  {:<32} [{}]\n", flag, s.help, "", details(s, command));
}

}  // namespace

std::string settings_help(std::string_view command, std::string_view usage) {
  std::string out = std::string(usage);
  if (!out.empty() && out.back() != '\n') out += '\n';
  const bool has_file = find_setting("config").takes(command);
  out += fmt::format(
      "\nsettings of 'tachyon {}': each from its flag, else its environment variables in\n"
      "the order shown, {}else the default.\n"
      "--a-b VALUE, --a-b=VALUE and --a_b VALUE are the same; booleans also take --a-b,\n"
      "--a-b true|false and --no-a-b.\n",
      command, has_file ? "else the settings file named by --config, " : "");
  for (const Setting& s : settings_table())
    if (s.takes(command)) out += line(s, command);
  return out;
}

std::string main_help() {
  std::string out =
      "usage: tachyon <command> [flags]   (tachyon <command> --help: its flags)\n\n"
      "commands:\n";
  for (const auto& [name, help] : subcommands()) out += fmt::format("  {:<14} {}\n", name, help);
  out += "\nsettings read from the environment only:\n";
  for (const Setting& s : settings_table())
    if (s.commands.empty()) {
      std::string vars;
      for (const SettingName& v : s.env) vars += (vars.empty() ? "" : ", ") + v.name;
      const std::string def = s.default_value.empty() ? "none" : s.default_value;
      out += fmt::format("  {:<22} {} [default {}]\n", vars, s.help, def);
    }
  return out;
}

}  // namespace tachyon
