// Reads a request's JSON object field by field with strict types and ranges. Every
// problem is an ApiError (400) naming the field by its path ("generate_config.top_k");
// finish() refuses the fields nobody asked for. JSON null counts as absent.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/json.h"
#include "server/api_error.h"

namespace tachyon::server {

class FieldReader {
 public:
  // `prefix` names the object in messages ("" at top level, "stream_options", ...).
  FieldReader(const Json& object, std::string prefix = {});

  bool has(const std::string& key) const;   // present and not null
  const Json* raw(const std::string& key);  // marks it read; nullptr when absent/null

  std::optional<bool> opt_bool(const std::string& key);
  std::optional<int64_t> opt_int(const std::string& key, int64_t min, int64_t max);
  std::optional<double> opt_number(const std::string& key, double min, double max);
  std::optional<std::string> opt_string(const std::string& key, size_t max_bytes = 1u << 20);
  // A string or a list of strings.
  std::optional<std::vector<std::string>> opt_strings(const std::string& key, size_t max_count,
                                                      size_t max_bytes_each);
  std::optional<std::vector<int32_t>> opt_int_list(const std::string& key, int64_t min, int64_t max,
                                                   size_t max_count);
  // A list of lists of ints (RTP-LLM's stop_words_list).
  std::optional<std::vector<std::vector<int32_t>>> opt_int_lists(const std::string& key,
                                                                 int64_t min, int64_t max,
                                                                 size_t max_count, size_t max_each);
  // Marks the key read without looking at it (a field accepted and ignored).
  void ignore(const std::string& key);
  // Marks the key read; refuses it (unsupported) unless absent, null or equal to one
  // of the `allowed` values.
  void refuse_unless(const std::string& key, const std::vector<Json>& allowed,
                     const std::string& why);

  // Throws unknown_field for the first key not read.
  void finish() const;

  std::string path(const std::string& key) const {
    return prefix_.empty() ? key : prefix_ + "." + key;
  }

 private:
  const Json& obj_;
  std::string prefix_;
  std::set<std::string> read_;
};

// The request body parsed as a JSON object (400 naming the problem otherwise).
Json parse_request_object(const std::string& body, size_t max_depth = 64);

// Checked conversions of a single JSON value (what = the field's path).
int64_t json_to_int(const Json& v, const std::string& what, int64_t min, int64_t max);
double json_to_number(const Json& v, const std::string& what, double min, double max);

}  // namespace tachyon::server
