// JSON Schema lowering against a table of schemas, each with instances it accepts and
// instances it refuses: a valid instance must match in its compact form and indented,
// an invalid one must not match in either form. Then the refusals of keywords that
// cannot be enforced and of hostile schemas.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace tachyon::grammar {
namespace {

using OJson = nlohmann::ordered_json;

std::shared_ptr<const TokenVocabulary> byte_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    t.push_back("");
    std::vector<bool> special(t.size(), false);
    return std::make_shared<const TokenVocabulary>(t, special,
                                                   std::vector<int32_t>{int32_t(t.size()) - 1});
  }();
  return vocab;
}

std::shared_ptr<const CompiledGrammar> compile(const std::string& schema, bool strict = false) {
  GrammarSpec spec{GrammarSpec::Kind::kJsonSchema, schema, {}};
  spec.strict = strict;
  return std::make_shared<const CompiledGrammar>(build_grammar(spec), byte_vocab());
}

bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

struct Case {
  const char* schema;
  std::vector<const char*> valid;
  std::vector<const char*> invalid;
  bool strict = false;
};

// Texts of an instance: as written, compact and indented (when it parses; an invalid
// one only when the compact form is the text, since parsing may normalise what makes it
// invalid: -0, 1e2).
std::vector<std::string> forms(const char* text, bool valid) {
  std::vector<std::string> out{text};
  try {
    const OJson j = OJson::parse(text);
    if (!valid && j.dump() != text) return out;
    out.push_back(j.dump());
    out.push_back(j.dump(2));
  } catch (const OJson::exception&) {
  }
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {R"({})", {"1", R"({"a":[null]})", R"("x")"}, {"", "tru", "{a}"}},
      {R"(true)", {"[]", "false"}, {"[,]"}},
      {R"({"type":"string"})", {R"("")", R"("a\"b\\c\n")", R"("\u00e9")"}, {"1", "null", R"("a)"}},
      {R"({"type":"integer"})", {"0", "-7", "123456789"}, {"1.5", "01", "-0", "\"1\"", "1e3"}},
      {R"({"type":"number"})", {"0", "-7.25", "1e-3", "2E+10"}, {".5", "1.", "+1", "NaN"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"1", "\"true\"", "null"}},
      {R"({"type":"null"})", {"null"}, {"0", "{}"}},
      {R"({"type":["string","null"]})", {R"("a")", "null"}, {"1", "[]"}},
      {R"({"type":["integer","number"],"maximum":3})", {"2", "2.5", "3"}, {"4", "3.5", "\"2\""}},
      {R"({"type":"integer","minimum":-12,"maximum":305})",
       {"-12", "-9", "-1", "0", "7", "99", "100", "299", "305"},
       {"-13", "-20", "306", "310", "400", "1000", "-100"}},
      {R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})",
       {"1", "9"},
       {"0", "10", "-1", "11"}},
      {R"({"type":"integer","minimum":100})",
       {"100", "999", "1000", "123456789"},
       {"99", "0", "-5"}},
      {R"({"type":"integer","maximum":-5})", {"-5", "-6", "-10", "-123456"}, {"-4", "0", "5"}},
      {R"({"type":"integer","minimum":1.5,"maximum":3.5})", {"2", "3"}, {"1", "4"}},
      {R"({"type":"integer","minimum":0,"maximum":9223372036854775807})",
       {"0", "9223372036854775807", "42"},
       {"-1", "9223372036854775808"}},
      {R"({"type":"number","minimum":0,"maximum":100})",
       {"0", "0.5", "99.99", "100", "100.00"},
       {"-0.5", "-1", "101", "100.5", "100.01", "150.5", "1e2"}},
      {R"({"type":"number","exclusiveMaximum":0})",
       {"-0.5", "-3", "-0.001"},
       {"0", "1", "0.5", "-0", "-0.0", "-0.000"}},
      {R"({"type":"number","exclusiveMinimum":1,"maximum":2})",
       {"1.5", "2", "1.01", "1.001", "2.000"},
       {"1", "1.0", "1.000", "2.5", "2.01", "0.9", "3"}},
      {R"({"type":"number","minimum":-2.5,"maximum":-1})",
       {"-1", "-1.0", "-2.5", "-2", "-1.5"},
       {"0", "-0.5", "-0.99", "-4", "-3"}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("abc")", R"("\n\u0041")", "\"\xC3\xA9\xC3\xA9\""},
       {R"("a")", R"("abcd")", R"("")"}},
      {R"({"type":"string","pattern":"^[a-z]+-\\d{2}$"})",
       {R"("ab-12")", R"("z-00")"},
       {R"("ab-1")", R"("Ab-12")", R"("ab-123")"}},
      {R"({"type":"string","pattern":"a\"b\\\\c"})", {R"("a\"b\\c")"}, {R"("a"b\c")", R"("abc")"}},
      {R"({"type":"string","format":"date"})",
       {R"("2024-02-29")", R"("1999-12-31")"},
       {R"("2024-13-01")", R"("2024-1-01")", R"("24-01-01")"}},
      {R"({"type":"string","format":"time"})",
       {R"("23:59:60Z")", R"("08:30:00.123+02:00")"},
       {R"("24:00:00Z")", R"("08:30")", R"("08:30:00")"}},
      {R"({"type":"string","format":"date-time"})",
       {R"("2024-05-01T10:00:00Z")", R"("2024-05-01T10:00:00.5-07:00")"},
       {R"("2024-05-01 10:00:00Z")", R"("2024-05-01")"}},
      {R"({"type":"string","format":"uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"}},
      {R"({"type":"string","format":"email"})",
       {R"("a.b+c@example.com")", R"("x@y.co")"},
       {R"("a@b")", R"("@example.com")", R"("a b@c.com")"}},
      {R"({"type":"string","format":"ipv4"})",
       {R"("192.168.0.1")", R"("255.255.255.255")", R"("0.0.0.0")"},
       {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")"}},
      {R"({"type":"string","format":"uri"})",
       {R"("https://example.com/a?b=c#d")", R"("urn:isbn:0451450523")", R"("http://x/%20y")"},
       {R"("example.com")", R"("http://a b")", R"("http://x/%2")", R"("1http://x")"}},
      {R"({"enum":["red",2,null,{"a":[1]},true]})",
       {R"("red")", "2", "null", R"({"a":[1]})", "true"},
       {R"("blue")", "3", "false", R"({"a":[2]})"}},
      {R"({"type":"string","enum":["a",1]})", {R"("a")"}, {"1"}},
      {R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")"}},
      {R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},"required":["a"]})",
       {R"({"b":1,"a":"x"})", R"({"a":"x"})", R"({"a":"x","extra":[1,2]})"},
       {R"({"a":"x","b":1})", R"({"b":1})", R"({"a":1})", "{}"}},
      {R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},"required":["a"],"additionalProperties":false})",
       {R"({"b":1,"a":"x"})", R"({"a":"x"})"},
       {R"({"a":"x","extra":1})", R"({"b":1})"}},
      {R"({"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"z":{"type":"integer"}}})",
       {"{}", R"({"x":1})", R"({"y":1})", R"({"z":1})", R"({"x":1,"z":3})",
        R"({"x":1,"y":2,"z":3})"},
       {R"({"z":1,"x":2})", R"({,"x":1})", R"({"x":1,})"},
       true},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {"{}", R"({"k":1,"j":2})"},
       {R"({"k":"v"})"}},
      {R"({"type":"object"})", {"{}", R"({"a":{"b":[]}})"}, {"[]", "1"}},
      {R"({"type":"object"})", {"{}"}, {R"({"a":1})"}, true},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]"},
       {"[]", "[1,2,3,4]", R"(["a"])", "[1,]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {R"(["a",1])", R"(["a"])", "[]"},
       {R"(["a",1,2])", R"([1,"a"])"}},
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"boolean"},"minItems":2})",
       {R"(["a",true])", R"(["a",true,false])"},
       {R"(["a"])", R"(["a",1])"}},
      {R"({"type":"array","items":[{"type":"integer"}],"additionalItems":false})",
       {"[1]", "[]"},
       {"[1,2]"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})",
       {"5", R"("a")"},
       {R"("ab")", "null"}},
      {R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},{"type":"null"}],"additionalProperties":false})",
       {R"({"k":"a"})", "null"},
       {R"({"k":"b"})", R"({"k":"a","x":1})"}},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}],"additionalProperties":false})",
       {R"({"a":1,"b":"x"})"},
       {R"({"a":1})", R"({"b":"x"})", R"({"b":"x","a":1})"}},
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
       {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
       {R"({"v":1})", R"({"v":1,"next":{"v":"x","next":null}})"}},
      {R"({"definitions":{"pos":{"type":"integer","minimum":1}},"type":"array","items":{"$ref":"#/definitions/pos"}})",
       {"[1,2,30]", "[]"},
       {"[0]", "[-1]"}},
      {R"({"type":"object","properties":{"tag":{"$ref":"#/$defs/t","description":"d"}},"$defs":{"t":{"type":"string","maxLength":2}}})",
       {R"({"tag":"ab"})"},
       {R"({"tag":"abc"})"}},
      {R"({"type":"integer","nullable":true})", {"1", "null"}, {R"("1")"}},
      {R"({"title":"T","description":"d","examples":[1],"default":2,"$schema":"x","$comment":"c","type":"integer"})",
       {"3"},
       {"\"3\""}},
  };
  return c;
}

TEST(JsonSchema, AcceptsValidAndRefusesInvalidInstances) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.schema);
    std::shared_ptr<const CompiledGrammar> g;
    ASSERT_NO_THROW(g = compile(c.schema, c.strict));
    for (const char* v : c.valid)
      for (const std::string& f : forms(v, true)) EXPECT_TRUE(matches(g, f)) << "valid: " << f;
    for (const char* v : c.invalid)
      for (const std::string& f : forms(v, false)) EXPECT_FALSE(matches(g, f)) << "invalid: " << f;
  }
}

TEST(JsonSchema, KeepsPropertiesInTheSchemaOrder) {
  auto g = compile(R"({"properties":{"z":{},"a":{}},"required":["z","a"]})", true);
  EXPECT_TRUE(matches(g, R"({"z":1,"a":2})"));
  EXPECT_FALSE(matches(g, R"({"a":2,"z":1})"));
}

TEST(JsonSchema, AdditionalPropertiesTakeOtherNames) {
  auto g = compile(R"({"properties":{"a":{"type":"integer"},"a\"b":{"type":"integer"}}})");
  EXPECT_TRUE(matches(g, R"({"a":1,"ab":"x","b":[],"":0,"a\"":1,"\u0041":2})"));
  EXPECT_FALSE(matches(g, R"({"a":1,"a":2})"));
  EXPECT_FALSE(matches(g, R"({"b":1,"a":2})"));
  EXPECT_FALSE(matches(g, R"({"b":1,"a\"b":2})"));
  EXPECT_FALSE(matches(g, R"({"b\x":1})"));
}

TEST(JsonSchema, StrictModeClosesObjects) {
  const char* s = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  EXPECT_TRUE(matches(compile(s, false), R"({"a":1,"b":2})"));
  EXPECT_FALSE(matches(compile(s, true), R"({"a":1,"b":2})"));
  EXPECT_TRUE(matches(compile(s, true), R"({"a":1})"));
}

TEST(JsonSchema, BoundsWhitespace) {
  auto g = compile(R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_TRUE(matches(g, "[" + std::string(20, ' ') + "1]"));
  EXPECT_FALSE(matches(g, "[" + std::string(21, ' ') + "1]"));
  EXPECT_FALSE(matches(g, " [1]"));
}

std::string error_of(const std::string& schema) {
  try {
    compile(schema);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(compiled)";
}

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingTheKeywordAndWhere) {
  struct Refusal {
    const char* schema;
    const char* says;
  };
  const Refusal refusals[] = {
      {R"({"type":"array","uniqueItems":true})", "at #: the keyword 'uniqueItems'"},
      {R"({"properties":{"n":{"type":"number","multipleOf":2}}})",
       "at #/properties/n: the keyword 'multipleOf'"},
      {R"({"not":{"type":"string"}})", "'not' cannot be enforced"},
      {R"({"if":{},"then":{}})", "'if' cannot be enforced"},
      {R"({"patternProperties":{"a":{}}})", "'patternProperties'"},
      {R"({"type":"object","x-custom":1})", "'x-custom'"},
      {R"({"items":{"$ref":"#/$defs/missing"}})", "at #/items: $ref '#/$defs/missing' points"},
      {R"({"$ref":"http://example.com/s.json"})", "only references within the schema"},
      {R"({"type":"strin"})", "not a JSON Schema type"},
      {R"({"type":"string","format":"color"})", "format: the format 'color' is not supported"},
      {R"({"type":"string","pattern":"(a"})", "at #: pattern: "},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no integer lies between the bounds"},
      {R"({"type":"string","maxLength":100000})", "maxLength above 1024"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "the types exclude each other"},
      {R"({"properties":{"a":false},"required":["a"]})", "at #/properties/a: the schema false"},
      {R"({"enum":[]})", "enum must be a non-empty array"},
      {R"({"type":"object",)", "not valid JSON"},
      {R"(3)", "a schema must be an object or a boolean"},
  };
  for (const Refusal& r : refusals) {
    const std::string e = error_of(r.schema);
    EXPECT_NE(e.find(r.says), std::string::npos) << r.schema << " -> " << e;
    EXPECT_EQ(e.rfind("json_schema: ", 0), 0u) << e;
  }
}

TEST(JsonSchema, HostileSchemasFailFast) {
  // Deep nesting.
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 200; ++i) deep += "}";
  EXPECT_NE(error_of(deep).find("nested deeper than"), std::string::npos) << error_of(deep);
  // Exponential expansion through references: each level used twice.
  std::string defs = R"({"$defs":{"d0":{"type":"integer"})";
  for (int i = 1; i < 40; ++i)
    defs += fmt::format(
        R"(,"d{0}":{{"prefixItems":[{{"$ref":"#/$defs/d{1}","nullable":false}},{{"$ref":"#/$defs/d{1}","nullable":false}}]}})",
        i, i - 1);
  defs += R"(},"$ref":"#/$defs/d39"})";
  EXPECT_NE(error_of(defs).find("subschemas"), std::string::npos) << error_of(defs);
  // Many optional properties: each may be the next one written.
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 400; ++i) wide += fmt::format(R"({}"p{}":{{}})", i ? "," : "", i);
  wide += "}}";
  EXPECT_NE(error_of(wide).find("400 properties, 400 of them optional"), std::string::npos)
      << error_of(wide);
  // A reference to itself without anything in between.
  EXPECT_NE(error_of(R"({"$ref":"#","minimum":1})").find("at #"), std::string::npos);
  const std::string loop = error_of(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})");
  EXPECT_EQ(loop.rfind("json_schema: ", 0), 0u) << loop;
}

}  // namespace
}  // namespace tachyon::grammar
