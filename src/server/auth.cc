#include "server/auth.h"

#include <cctype>
#include <cstdint>

#include "core/error.h"

namespace tachyon::server {

ApiKeys::ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {
  for (const auto& k : keys_) {
    if (k.empty()) raise<InvalidArgument>("an API key must not be empty");
    if (k.size() > kMaxKeyBytes)
      raise<InvalidArgument>("API keys are limited to {} bytes", kMaxKeyBytes);
  }
}

bool ApiKeys::equal(std::string_view presented, const std::string& key) {
  // Both sides are read over the same fixed span whatever their lengths; the lengths
  // are compared as data too.
  volatile uint8_t diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < kMaxKeyBytes; ++i) {
    uint8_t a = i < presented.size() ? static_cast<uint8_t>(presented[i]) : 0;
    uint8_t b = i < key.size() ? static_cast<uint8_t>(key[i]) : 0;
    diff = diff | (a ^ b);
  }
  return presented.size() <= kMaxKeyBytes && diff == 0;
}

bool ApiKeys::allows(const std::string_view* authorization) const {
  if (keys_.empty()) return true;
  if (authorization == nullptr) return false;
  std::string_view v = *authorization;
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  constexpr std::string_view kBearer = "Bearer ";
  if (v.size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(v[i])) !=
        std::tolower(static_cast<unsigned char>(kBearer[i])))
      return false;
  v.remove_prefix(kBearer.size());
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  bool ok = false;
  for (const auto& k : keys_) ok = equal(v, k) | ok;  // no short-circuit: check every key
  return ok;
}

}  // namespace tachyon::server
