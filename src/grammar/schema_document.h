// A JSON Schema as a document, before lowering: its keywords sorted into annotations,
// supported ones and the rest, references resolved within it, allOf branches merged
// into one schema, and the budget on the work a hostile schema may cause. Used by
// json_schema.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"

namespace tachyon::grammar::schema {

using OJson = nlohmann::ordered_json;

// Throws InvalidArgument "at #<ptr>: <what>".
[[noreturn]] void fail_at(const std::string& ptr, const std::string& what);

bool is_annotation(std::string_view keyword);  // ignored: title, description, ...
bool is_supported(std::string_view keyword);   // enforced
bool only_annotations(const OJson& schema);
OJson without(const OJson& schema, std::string_view keyword);
// A key as a JSON pointer token (~ and / escaped).
std::string pointer_token(std::string_view key);
// Whether a value is of a JSON Schema type ("integer": a number without a fraction).
bool has_type(const OJson& v, std::string_view type);
// The types of a `type` keyword (a name or a list of names), checked.
std::vector<std::string> type_list(const OJson& type, const std::string& ptr);

class SchemaDocument {
 public:
  SchemaDocument(const OJson& root, const JsonSchemaLimits& limits)
      : root_(root), limits_(limits) {}
  const OJson& root() const { return root_; }

  // What a $ref value points to ("#", "#/$defs/x", any JSON pointer in the document).
  const OJson& resolve(const OJson& ref, const std::string& ptr) const;
  // a with b's constraints added (allOf; the siblings of $ref, anyOf and oneOf): b's
  // reference resolved, properties united (a property in both: allOf of the two),
  // required united, types intersected, bounds tightened; anything else must agree.
  OJson merge(OJson a, const OJson& b, const std::string& ptr, int depth);
  // Counts one more subschema at `depth`; throws past the limits.
  void count(const std::string& ptr, int depth);

 private:
  const OJson& root_;
  JsonSchemaLimits limits_;
  size_t schemas_ = 0;
};

}  // namespace tachyon::grammar::schema
