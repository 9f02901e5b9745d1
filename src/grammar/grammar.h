// The grammar form every constraint compiles into (regex, choice, GBNF, JSON): rules of
// alternatives, each a sequence of elements that are either a set of bytes or a
// reference to a rule. Text is matched byte by byte (UTF-8): a class of code points
// becomes alternatives of byte-range sequences, so that a token ending inside a
// character is matched exactly. The parsers produce an AST (GrammarNode) that lower()
// turns into the form, expanding repetitions into helper rules under GrammarLimits.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tachyon::grammar {

// Bounds that make hostile grammars fail fast with InvalidArgument.
struct GrammarLimits {
  size_t max_text_bytes = size_t{1} << 20;  // the grammar or regex text
  size_t max_rules = 8192;                  // rules after expansion
  size_t max_elements = size_t{1} << 18;    // elements after expansion
  int32_t max_repeat = 1024;                // m and n of {m,n}
  int32_t max_nesting = 256;                // parentheses and brackets
  size_t max_stacks = 4096;                 // parse stacks alive at once (matcher)
  size_t max_stack_depth = 4096;            // nested rules on one stack (matcher)
};

// A set of code points as sorted, disjoint, inclusive ranges.
using CodePointRanges = std::vector<std::pair<char32_t, char32_t>>;
inline constexpr char32_t kMaxCodePoint = 0x10FFFF;
// Sorts and merges; the complement over [0, kMaxCodePoint].
CodePointRanges normalize_ranges(CodePointRanges r);
CodePointRanges complement_ranges(const CodePointRanges& r);

// The parsers' output.
struct GrammarNode {
  enum class Kind : uint8_t {
    kSequence,     // children in order (none: the empty string)
    kAlternation,  // one of the children
    kLiteral,      // the bytes of `text`
    kClass,        // one code point of `ranges`
    kRef,          // the rule named `text`
    kRepeat,       // children[0] between min and max times (max -1: unbounded)
  };
  Kind kind = Kind::kSequence;
  std::vector<GrammarNode> children;
  std::string text;
  CodePointRanges ranges;
  int32_t min = 0, max = -1;
};
struct RuleDefinition {
  std::string name;
  GrammarNode body;
};

// The compiled form. elements holds every alternative, each ended by a kEnd element;
// rules[r] lists where its alternatives start.
struct Grammar {
  struct Element {
    enum Kind : uint32_t { kEnd = 0, kBytes = 1, kRef = 2 };
    uint32_t kind : 2;
    uint32_t arg : 30;  // kBytes: an index into byte_sets; kRef: a rule
  };
  std::vector<Element> elements;
  std::vector<std::bitset<256>> byte_sets;
  std::vector<std::vector<uint32_t>> rules;
  std::vector<std::string> rule_names;
  uint32_t root = 0;
};

// Lowers parsed rules (root named `root`) into the form. Throws InvalidArgument naming
// the problem: an undefined or twice-defined rule, no root, a limit exceeded, a
// left-recursive rule, or a root that matches no text at all.
Grammar lower(const std::vector<RuleDefinition>& rules, const std::string& root,
              const GrammarLimits& limits);

// Every byte sequence that encodes a code point of [lo, hi] (surrogates excluded), as
// sequences of byte ranges.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_range_sequences(char32_t lo,
                                                                           char32_t hi);

}  // namespace tachyon::grammar
