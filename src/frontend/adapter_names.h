// The names LoRA adapters are registered under (and requests select them by): 1 to 128
// characters of [A-Za-z0-9._-/:], the set of vLLM's and RTP-LLM's usual names, safe in
// URLs, logs and metric labels.
#pragma once

#include <string>
#include <string_view>

namespace tachyon {

inline constexpr size_t kMaxAdapterNameBytes = 128;

// Why `name` cannot name an adapter; empty when it can.
inline std::string adapter_name_problem(std::string_view name) {
  if (name.empty()) return "an adapter name must not be empty";
  if (name.size() > kMaxAdapterNameBytes)
    return "adapter name '" + std::string(name.substr(0, 32)) + "...' is longer than " +
           std::to_string(kMaxAdapterNameBytes) + " characters";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == '/' || c == ':';
    if (!ok)
      return "adapter name '" + std::string(name) + "' may hold only letters, digits and . _ - / :";
  }
  return {};
}

}  // namespace tachyon
