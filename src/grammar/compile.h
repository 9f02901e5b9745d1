// A constraint as a request states it (GrammarSpec), its compilation into the grammar
// form, and the cache of compiled grammars shared by the requests of one vocabulary.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace tachyon::grammar {

struct GrammarSpec {
  enum class Kind : uint8_t {
    kRegex,       // text: a regex (parsers.h) the whole output matches
    kChoice,      // choices: the output is one of them
    kGrammar,     // text: GBNF rules with a `root`
    kJson,        // any JSON value
    kJsonObject,  // a JSON object
    kJsonSchema,  // text: a JSON Schema (json_schema.h) the output is valid under
  };
  Kind kind = Kind::kRegex;
  std::string text;
  std::vector<std::string> choices;
  // kJsonSchema: OpenAI's strict mode (objects allow no properties but the listed ones
  // unless additionalProperties says otherwise).
  bool strict = false;

  bool operator==(const GrammarSpec&) const = default;
};
std::string_view grammar_kind_name(GrammarSpec::Kind kind);

// The built-in JSON grammar (GBNF; root: a value, or an object when object_only).
// Whitespace between tokens is bounded (at most 20 characters at a time) so that a model
// cannot loop forever on it; the text starts with the value and ends with it.
std::string json_gbnf(bool object_only);

// Parses and lowers a spec; throws InvalidArgument naming the kind and the problem
// ("regex: an unterminated group at offset 2").
Grammar build_grammar(const GrammarSpec& spec, const GrammarLimits& limits = {});

// Compiled grammars by (kind, text, vocabulary), the least recently used dropped
// beyond `capacity`. Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  std::shared_ptr<const CompiledGrammar> get(const GrammarSpec& spec,
                                             std::shared_ptr<const TokenVocabulary> vocab);
  size_t size() const;

 private:
  using Key = std::tuple<GrammarSpec::Kind, bool, std::string, uint64_t>;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Key> order_;  // most recent first
  std::map<Key, std::pair<std::shared_ptr<const CompiledGrammar>, std::list<Key>::iterator>> map_;
};

}  // namespace tachyon::grammar
