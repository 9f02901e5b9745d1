// The pieces of JSON Schema lowering that concern one scalar value: integer and number
// ranges as digit grammars, and strings as JSON string literals whose decoded text
// matches a regex, a format or a length range. Used by json_schema.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace tachyon::grammar::schema {

// Node builders.
GrammarNode literal(std::string text);
GrammarNode char_class(CodePointRanges ranges);
GrammarNode rule_ref(std::string name);
GrammarNode sequence(std::vector<GrammarNode> children);
GrammarNode alternation(std::vector<GrammarNode> children);
GrammarNode repeat(GrammarNode unit, int32_t min, int32_t max);

// The integers in [lo, hi] (either side open when absent) in JSON's form (no leading
// zeros, no "-0"), exactly. Requires lo <= hi when both are given.
GrammarNode integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// Numbers between bounds (each inclusive or exclusive), written without an exponent:
// exact when the bounds are integers; a fractional bound is enforced on the integer
// part only (maximum 2.5 allows 2.9). Bounds beyond +-9e18 are refused.
GrammarNode number_range(std::optional<double> lo, bool lo_exclusive, std::optional<double> hi,
                         bool hi_exclusive);

// Rewrites a node over decoded text into one over the text's JSON string body: '"',
// '\' and control characters are matched in their escaped form (\", \\, \n, \r, \t, \b,
// \f, \u00XX), everything else as itself.
GrammarNode json_escaped(GrammarNode decoded);

// A JSON string literal (with its quotes) whose decoded text matches the regex; the
// regex is matched against the whole string (^ and $ are implied).
GrammarNode string_pattern(std::string_view regex, const GrammarLimits& limits);
// A JSON string literal in a format: date, time, date-time, duration, uuid, email,
// hostname, ipv4, uri (a
// scheme, then the characters a URI may hold). Throws InvalidArgument for any other.
GrammarNode string_format(std::string_view format, const GrammarLimits& limits);

// A JSON string literal (with its quotes) other than the given ones, each given as the
// text between its quotes as a JSON encoder writes it ("a\"b" for a"b): the names an
// additional property may not take. A name written with other escapes than the
// encoder's (\u0061 for a) is not recognised as the same.
GrammarNode string_except(const std::vector<std::string>& encoded);

}  // namespace tachyon::grammar::schema
