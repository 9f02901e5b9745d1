// JSON Schema lowered into the grammar form: the JSON texts a schema accepts, with
// properties in the schema's order and whitespace bounded as json_gbnf() bounds it.
//
// Supported: type (one or a list), properties / required / additionalProperties
// (false, true or a schema; absent: false when strict, as OpenAI's strict mode, else
// true; additional properties follow the listed ones, under any name), items /
// prefixItems (and draft-4 items arrays with additionalItems) / minItems / maxItems,
// enum / const (any JSON values, matched in their compact form), anyOf, oneOf (as
// anyOf), allOf (merged: properties united, required united, types intersected,
// bounds tightened), $ref to a JSON pointer in the schema ("#/$defs/x",
// "#/definitions/x", "#"; recursion through rules), nullable, minLength / maxLength,
// pattern (regex of parsers.h, matched against the whole string), format (date, time,
// date-time, duration, uuid, email, hostname, ipv4, uri), minimum / maximum /
// exclusiveMinimum / exclusiveMaximum (exact for integers, and for numbers when the
// bounds are integers; see number_range), boolean schemas, and the empty schema
// (any JSON value). Annotations (title, description, examples, default, $schema, $id,
// $comment, $defs, definitions, deprecated, readOnly, writeOnly, discriminator) are
// ignored; any other keyword (uniqueItems, multipleOf, not, if, patternProperties, ...)
// is refused. enum and const take precedence over the other keywords but type.
#pragma once

#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace tachyon::grammar {

// Bounds on the work a hostile schema may cause (beyond GrammarLimits).
struct JsonSchemaLimits {
  int32_t max_depth = 128;     // nested schemas, counted along one path
  size_t max_schemas = 20000;  // subschemas lowered, references and merges included
};

// The rules (root named "root") of the JSON texts valid under the schema (its JSON
// text). Throws InvalidArgument naming the problem and where it is as a JSON pointer
// ("at #/properties/tags: 'uniqueItems' cannot be enforced").
std::vector<RuleDefinition> json_schema_rules(std::string_view schema, bool strict,
                                              const GrammarLimits& limits,
                                              const JsonSchemaLimits& schema_limits = {});

}  // namespace tachyon::grammar
