// The --config file of core/settings.h: a YAML (or JSON, a subset of YAML) mapping of
// setting names to values, each a scalar or a sequence of scalars.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tachyon {

// The file's entries in order: (key, values), one value for a scalar. Throws
// InvalidArgument naming the file on an unreadable or malformed file.
std::vector<std::pair<std::string, std::vector<std::string>>> read_settings_file(
    const std::string& path);

}  // namespace tachyon
