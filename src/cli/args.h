// A subcommand's settings from its arguments (core/settings.h), with --help handled.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/settings.h"

namespace tachyon::cli {

// Resolves `command`'s settings from `argv` and the environment. On --help / -h prints
// `usage` and the settings' table to stdout and returns nullopt (the command then
// exits 0). Checks the settings read from the environment only (TACHYON_CPU_ISA, ...).
// Applies --log-level and --threads where the command takes them.
std::optional<SettingValues> parse_command(std::string_view command,
                                           const std::vector<std::string>& argv,
                                           std::string_view usage);

int64_t parse_int(const std::string& text, const std::string& what);

}  // namespace tachyon::cli
