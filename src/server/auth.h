// Optional API keys: "Authorization: Bearer <key>" must name one of them. Keys are
// compared in constant time (no early exit on the first differing byte, every key
// checked), so response timing does not reveal how much of a guess was right.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tachyon::server {

class ApiKeys {
 public:
  static constexpr size_t kMaxKeyBytes = 256;

  // Throws InvalidArgument on an empty key or one longer than kMaxKeyBytes.
  explicit ApiKeys(std::vector<std::string> keys = {});

  bool enabled() const { return !keys_.empty(); }
  // The value of an Authorization header (nullptr when absent).
  bool allows(const std::string_view* authorization) const;
  // Constant-time equality of a presented key with one configured key.
  static bool equal(std::string_view presented, const std::string& key);

 private:
  std::vector<std::string> keys_;
};

}  // namespace tachyon::server
