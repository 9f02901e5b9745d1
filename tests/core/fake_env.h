// An environment for settings tests: variables from a map instead of the process's.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/settings.h"

namespace tachyon::testing {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup fn() const {
    return [this](const std::string& k) -> std::optional<std::string> {
      auto it = vars.find(k);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

}  // namespace tachyon::testing
