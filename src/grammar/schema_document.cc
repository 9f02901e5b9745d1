#include "grammar/schema_document.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tachyon::grammar::schema {

[[noreturn]] void fail_at(const std::string& ptr, const std::string& what) {
  raise<InvalidArgument>("at #{}: {}", ptr, what);
}

namespace {

bool one_of(std::string_view k, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), k) != set.end();
}

}  // namespace

bool is_annotation(std::string_view k) {
  return one_of(
      k, {"title", "description", "examples", "default", "$schema", "$id", "$comment", "$defs",
          "definitions", "deprecated", "readOnly", "writeOnly", "discriminator"});
}
bool is_supported(std::string_view k) {
  return one_of(k, {"type",
                    "properties",
                    "required",
                    "additionalProperties",
                    "items",
                    "prefixItems",
                    "additionalItems",
                    "minItems",
                    "maxItems",
                    "enum",
                    "const",
                    "anyOf",
                    "oneOf",
                    "allOf",
                    "$ref",
                    "nullable",
                    "minLength",
                    "maxLength",
                    "pattern",
                    "format",
                    "minimum",
                    "maximum",
                    "exclusiveMinimum",
                    "exclusiveMaximum"});
}

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

bool has_type(const OJson& v, std::string_view t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

bool only_annotations(const OJson& s) {
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!is_annotation(it.key())) return false;
  return true;
}
OJson without(const OJson& s, std::string_view key) {
  OJson out = OJson::object();
  for (auto it = s.begin(); it != s.end(); ++it)
    if (it.key() != key) out[it.key()] = it.value();
  return out;
}

std::vector<std::string> type_list(const OJson& t, const std::string& ptr) {
  std::vector<std::string> out;
  auto add = [&](const OJson& v) {
    static constexpr std::string_view kTypes[] = {"null",   "boolean", "object", "array",
                                                  "number", "string",  "integer"};
    if (!v.is_string() ||
        std::find(std::begin(kTypes), std::end(kTypes), v.get<std::string>()) == std::end(kTypes))
      fail_at(ptr, fmt::format("type: {} is not a JSON Schema type", v.dump()));
    if (std::find(out.begin(), out.end(), v.get<std::string>()) == out.end())
      out.push_back(v.get<std::string>());
  };
  if (t.is_array()) {
    for (const OJson& v : t) add(v);
    if (out.empty()) fail_at(ptr, "type: an empty list of types");
  } else {
    add(t);
  }
  return out;
}

// allOf (and siblings of $ref, anyOf, oneOf): b's constraints added to a.
void SchemaDocument::count(const std::string& ptr, int depth) {
  if (++schemas_ > limits_.max_schemas)
    fail_at(ptr, fmt::format("more than {} subschemas to lower", limits_.max_schemas));
  if (depth > limits_.max_depth)
    fail_at(ptr, fmt::format("schemas nested deeper than {}", limits_.max_depth));
}

const OJson& SchemaDocument::resolve(const OJson& ref, const std::string& ptr) const {
  if (!ref.is_string()) fail_at(ptr, "$ref must be a string");
  const std::string r = ref.get<std::string>();
  if (r.empty() || r[0] != '#')
    fail_at(ptr,
            fmt::format("$ref '{}': only references within the schema (#...) are supported", r));
  const OJson* at = &root_;
  size_t pos = 1;
  if (r.size() > 1 && r[1] != '/') fail_at(ptr, fmt::format("$ref '{}' is not a JSON pointer", r));
  while (pos < r.size()) {
    const size_t next = std::min(r.find('/', pos + 1), r.size());
    std::string token;
    for (size_t i = pos + 1; i < next; ++i) {
      if (r[i] == '~' && i + 1 < next && (r[i + 1] == '0' || r[i + 1] == '1')) {
        token += r[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += r[i];
      }
    }
    if (at->is_object() && at->contains(token)) {
      at = &(*at)[token];
    } else if (at->is_array() && !token.empty() &&
               token.find_first_not_of("0123456789") == std::string::npos && token.size() < 9 &&
               std::stoul(token) < at->size()) {
      at = &(*at)[std::stoul(token)];
    } else {
      fail_at(ptr, fmt::format("$ref '{}' points to nothing", r));
    }
    pos = next;
  }
  return *at;
}

OJson SchemaDocument::merge(OJson a, const OJson& b_in, const std::string& ptr, int depth) {
  count(ptr, depth);
  OJson b = b_in;
  if (b.is_object() && b.contains("$ref")) {  // the target with b's other keywords
    OJson target = resolve(b["$ref"], ptr);
    if (target.is_boolean() && target.get<bool>()) target = OJson::object();
    if (target.is_object()) b = merge(std::move(target), without(b, "$ref"), ptr, depth + 1);
  }
  if (b.is_boolean()) {
    if (b.get<bool>()) return a;
    fail_at(ptr, "the schema false matches nothing");
  }
  if (!b.is_object()) fail_at(ptr, "a schema must be an object or a boolean");
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string& k = it.key();
    const OJson& v = it.value();
    if (is_annotation(k)) continue;
    if (!a.contains(k)) {
      a[k] = v;
    } else if (a[k] == v) {
    } else if (k == "properties" && v.is_object() && a[k].is_object()) {
      for (auto p = v.begin(); p != v.end(); ++p) {
        if (a[k].contains(p.key()) && a[k][p.key()] != p.value())
          a[k][p.key()] = OJson{{"allOf", OJson::array({a[k][p.key()], p.value()})}};
        else
          a[k][p.key()] = p.value();
      }
    } else if ((k == "required" || k == "allOf") && v.is_array() && a[k].is_array()) {
      for (const OJson& x : v)
        if (std::find(a[k].begin(), a[k].end(), x) == a[k].end()) a[k].push_back(x);
    } else if (k == "type") {
      std::vector<std::string> x = type_list(a[k], ptr), y = type_list(v, ptr), both;
      for (const std::string& t : x)
        for (const std::string& u : y)
          if (t == u || (t == "number" && u == "integer") || (t == "integer" && u == "number"))
            if (std::find(both.begin(), both.end(), t == "number" ? u : t) == both.end())
              both.push_back(t == "number" ? u : t);
      if (both.empty()) fail_at(ptr, "allOf: the types exclude each other");
      a[k] = both;
    } else if (one_of(k, {"minimum", "minLength", "minItems", "exclusiveMinimum"}) &&
               v.is_number() && a[k].is_number()) {
      if (v.get<double>() > a[k].get<double>()) a[k] = v;
    } else if (one_of(k, {"maximum", "maxLength", "maxItems", "exclusiveMaximum"}) &&
               v.is_number() && a[k].is_number()) {
      if (v.get<double>() < a[k].get<double>()) a[k] = v;
    } else {
      fail_at(ptr, fmt::format("allOf: the values of '{}' cannot be merged", k));
    }
  }
  return a;
}

// One JSON value, whitespace allowed between its tokens as json_gbnf() allows it.
}  // namespace tachyon::grammar::schema
