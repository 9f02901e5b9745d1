#include "grammar/compile.h"

#include "core/error.h"
#include "core/json.h"
#include "grammar/json_schema.h"
#include "grammar/parsers.h"

namespace tachyon::grammar {

std::string_view grammar_kind_name(GrammarSpec::Kind kind) {
  switch (kind) {
    case GrammarSpec::Kind::kRegex:
      return "regex";
    case GrammarSpec::Kind::kChoice:
      return "choice";
    case GrammarSpec::Kind::kGrammar:
      return "grammar";
    case GrammarSpec::Kind::kJson:
      return "json";
    case GrammarSpec::Kind::kJsonObject:
      return "json_object";
    case GrammarSpec::Kind::kJsonSchema:
      return "json_schema";
  }
  return "?";
}

std::string json_gbnf(bool object_only) {
  std::string g = object_only ? "root ::= object\n" : "root ::= value\n";
  g += R"(value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n\r]{0,20}
)";
  return g;
}

namespace {

Grammar build(const GrammarSpec& spec, const GrammarLimits& limits) {
  using Kind = GrammarSpec::Kind;
  switch (spec.kind) {
    case Kind::kRegex: {
      std::vector<RuleDefinition> rules(1);
      rules[0].name = "root";
      rules[0].body = parse_regex(spec.text, limits);
      return lower(rules, "root", limits);
    }
    case Kind::kChoice: {
      if (spec.choices.empty()) raise<InvalidArgument>("the list of choices is empty");
      size_t total = 0;
      std::vector<RuleDefinition> rules(1);
      rules[0].name = "root";
      rules[0].body.kind = GrammarNode::Kind::kAlternation;
      for (const std::string& c : spec.choices) {
        total += c.size();
        if (total > limits.max_text_bytes)
          raise<InvalidArgument>("the choices exceed {} bytes", limits.max_text_bytes);
        GrammarNode lit;
        lit.kind = GrammarNode::Kind::kLiteral;
        lit.text = c;
        rules[0].body.children.push_back(std::move(lit));
      }
      return lower(rules, "root", limits);
    }
    case Kind::kGrammar:
      return lower(parse_gbnf(spec.text, limits), "root", limits);
    case Kind::kJson:
    case Kind::kJsonObject:
      return lower(parse_gbnf(json_gbnf(spec.kind == Kind::kJsonObject), limits), "root", limits);
    case Kind::kJsonSchema:
      return lower(json_schema_rules(spec.text, spec.strict, limits), "root", limits);
  }
  raise<InvalidArgument>("unknown grammar kind");
}

}  // namespace

Grammar build_grammar(const GrammarSpec& spec, const GrammarLimits& limits) {
  try {
    return build(spec, limits);
  } catch (const InvalidArgument& e) {
    raise<InvalidArgument>("{}: {}", grammar_kind_name(spec.kind), e.what());
  }
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(
    const GrammarSpec& spec, std::shared_ptr<const TokenVocabulary> vocab) {
  std::string text = spec.text;
  if (spec.kind == GrammarSpec::Kind::kChoice) text = Json(spec.choices).dump();
  Key key{spec.kind, spec.strict, std::move(text), vocab->fingerprint()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = map_.find(key); it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  auto compiled = std::make_shared<const CompiledGrammar>(build_grammar(spec), std::move(vocab));
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = map_.find(key); it != map_.end()) return it->second.first;
  order_.push_front(key);
  map_.emplace(key, std::make_pair(compiled, order_.begin()));
  while (map_.size() > capacity_) {
    map_.erase(order_.back());
    order_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return map_.size();
}

}  // namespace tachyon::grammar
