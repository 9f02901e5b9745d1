#include "server/json_fields.h"

#include <cmath>

#include "core/error.h"

namespace tachyon::server {

int64_t json_to_int(const Json& v, const std::string& what, int64_t min, int64_t max) {
  int64_t out = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX))
      throw ApiError::bad_request(what + " is out of range", what);
    out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < -9.2e18 || d > 9.2e18)
      throw ApiError::bad_request(what + " must be an integer", what);
    out = static_cast<int64_t>(d);
  } else {
    throw ApiError::bad_request(what + " must be an integer, not " + json_type_name(v), what);
  }
  if (out < min || out > max)
    throw ApiError::bad_request(what + " must be between " + std::to_string(min) + " and " +
                                    std::to_string(max) + ", got " + std::to_string(out),
                                what);
  return out;
}

double json_to_number(const Json& v, const std::string& what, double min, double max) {
  if (!v.is_number())
    throw ApiError::bad_request(what + " must be a number, not " + json_type_name(v), what);
  double d = v.get<double>();
  if (!std::isfinite(d) || d < min || d > max)
    throw ApiError::bad_request(what + " must be between " + Json(min).dump() + " and " +
                                    Json(max).dump() + ", got " + v.dump(),
                                what);
  return d;
}

FieldReader::FieldReader(const Json& object, std::string prefix)
    : obj_(object), prefix_(std::move(prefix)) {
  if (!obj_.is_object())
    throw ApiError::bad_request(
        (prefix_.empty() ? std::string("the request") : prefix_) + " must be a JSON object",
        prefix_);
}

bool FieldReader::has(const std::string& key) const {
  auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

const Json* FieldReader::raw(const std::string& key) {
  read_.insert(key);
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> FieldReader::opt_bool(const std::string& key) {
  const Json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw ApiError::bad_request(path(key) + " must be a boolean, not " + json_type_name(*v),
                                path(key));
  return v->get<bool>();
}

std::optional<int64_t> FieldReader::opt_int(const std::string& key, int64_t min, int64_t max) {
  const Json* v = raw(key);
  if (!v) return std::nullopt;
  return json_to_int(*v, path(key), min, max);
}

std::optional<double> FieldReader::opt_number(const std::string& key, double min, double max) {
  const Json* v = raw(key);
  if (!v) return std::nullopt;
  return json_to_number(*v, path(key), min, max);
}

std::optional<std::string> FieldReader::opt_string(const std::string& key, size_t max_bytes) {
  const Json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_string())
    throw ApiError::bad_request(path(key) + " must be a string, not " + json_type_name(*v),
                                path(key));
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes)
    throw ApiError::bad_request(
        path(key) + " is longer than " + std::to_string(max_bytes) + " bytes", path(key));
  return s;
}

std::optional<std::vector<std::string>> FieldReader::opt_strings(const std::string& key,
                                                                 size_t max_count,
                                                                 size_t max_bytes_each) {
  const Json* v = raw(key);
  if (!v) return std::nullopt;
  std::vector<std::string> out;
  auto take = [&](const Json& s, const std::string& where) {
    if (!s.is_string())
      throw ApiError::bad_request(where + " must be a string, not " + json_type_name(s), path(key));
    if (s.get_ref<const std::string&>().size() > max_bytes_each)
      throw ApiError::bad_request(
          where + " is longer than " + std::to_string(max_bytes_each) + " bytes", path(key));
    out.push_back(s.get<std::string>());
  };
  if (v->is_string()) {
    take(*v, path(key));
  } else if (v->is_array()) {
    if (v->size() > max_count)
      throw ApiError::bad_request(path(key) + " has " + std::to_string(v->size()) +
                                      " entries; at most " + std::to_string(max_count) +
                                      " are allowed",
                                  path(key));
    for (size_t i = 0; i < v->size(); ++i) take((*v)[i], path(key) + "[" + std::to_string(i) + "]");
  } else {
    throw ApiError::bad_request(
        path(key) + " must be a string or an array of strings, not " + json_type_name(*v),
        path(key));
  }
  return out;
}

std::optional<std::vector<int32_t>> FieldReader::opt_int_list(const std::string& key, int64_t min,
                                                              int64_t max, size_t max_count) {
  const Json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_array())
    throw ApiError::bad_request(
        path(key) + " must be an array of integers, not " + json_type_name(*v), path(key));
  if (v->size() > max_count)
    throw ApiError::bad_request(
        path(key) + " has more than " + std::to_string(max_count) + " entries", path(key));
  std::vector<int32_t> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i)
    out.push_back(static_cast<int32_t>(
        json_to_int((*v)[i], path(key) + "[" + std::to_string(i) + "]", min, max)));
  return out;
}

std::optional<std::vector<std::vector<int32_t>>> FieldReader::opt_int_lists(
    const std::string& key, int64_t min, int64_t max, size_t max_count, size_t max_each) {
  const Json* v = raw(key);
  if (!v) return std::nullopt;
  if (!v->is_array())
    throw ApiError::bad_request(path(key) + " must be an array of arrays of integers", path(key));
  if (v->size() > max_count)
    throw ApiError::bad_request(
        path(key) + " has more than " + std::to_string(max_count) + " entries", path(key));
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& inner = (*v)[i];
    std::string where = path(key) + "[" + std::to_string(i) + "]";
    if (!inner.is_array())
      throw ApiError::bad_request(where + " must be an array of integers", path(key));
    if (inner.empty() || inner.size() > max_each)
      throw ApiError::bad_request(
          where + " must have 1 to " + std::to_string(max_each) + " entries", path(key));
    std::vector<int32_t> ids;
    for (size_t j = 0; j < inner.size(); ++j)
      ids.push_back(static_cast<int32_t>(
          json_to_int(inner[j], where + "[" + std::to_string(j) + "]", min, max)));
    out.push_back(std::move(ids));
  }
  return out;
}

void FieldReader::ignore(const std::string& key) {
  read_.insert(key);
}

void FieldReader::refuse_unless(const std::string& key, const std::vector<Json>& allowed,
                                const std::string& why) {
  const Json* v = raw(key);
  if (!v) return;
  for (const auto& a : allowed)
    if (*v == a) return;
  throw ApiError::unsupported(path(key) + ": " + why, path(key));
}

void FieldReader::finish() const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it)
    if (!read_.count(it.key())) throw ApiError::unknown_field(path(it.key()));
}

Json parse_request_object(const std::string& body, size_t max_depth) {
  if (body.empty())
    throw ApiError::bad_request("the request body is empty; a JSON object is expected");
  Json j;
  try {
    j = parse_json(body, "request body", static_cast<int>(max_depth));
  } catch (const Error& e) {
    throw ApiError::bad_request(e.what());
  }
  if (!j.is_object())
    throw ApiError::bad_request(std::string("the request body must be a JSON object, not ") +
                                json_type_name(j));
  return j;
}

}  // namespace tachyon::server
