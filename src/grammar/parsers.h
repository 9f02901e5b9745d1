// The text forms a constraint is written in, parsed into GrammarNode trees (grammar.h).
// Each throws InvalidArgument naming the problem and its byte offset.
#pragma once

#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace tachyon::grammar {

// llama.cpp's GBNF: `name ::= body` rules (names of letters, digits, '-' and '_'; the
// start rule is `root`), "literals" and [classes] with \n \r \t \\ \" \] \xHH \uHHHH
// \UHHHHHHHH escapes, `.` (any character), (groups), |, and the postfixes ?, *, +, {m},
// {m,}, {m,n}; # starts a comment. A rule runs until the next `name ::=`.
std::vector<RuleDefinition> parse_gbnf(std::string_view text, const GrammarLimits& limits);

// An ECMAScript-like regex matched against the whole output (^ and $ are implied and
// allowed only at its ends): literals, `.` (any character but \n and \r), [classes]
// with ranges and negation, \d \D \w \W \s \S, the escapes \n \r \t \f \v \0 \xHH
// \uHHHH \u{H...}, groups ( ), (?: ), (?<name> ), |, and ?, *, +, {m}, {m,}, {m,n}
// (a lazy `?` after one is accepted: it matches the same texts). Backreferences,
// lookaround and word boundaries are refused.
GrammarNode parse_regex(std::string_view pattern, const GrammarLimits& limits);

}  // namespace tachyon::grammar
