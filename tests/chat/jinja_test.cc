// Feature tests with hand-derived expectations (jinja2 semantics as its lexer,
// parser and runtime define them; each also cross-checked with jinja2 itself).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "chat/jinja.h"
#include "chat/jinja_strings.h"
#include "core/error.h"

namespace tachyon::jinja {
namespace {

std::string r(const std::string& src, Vars vars = {}) {
  return Template::parse(src).render(vars);
}
Value j(const char* json) {
  return from_json(Json::parse(json));
}

TEST(JinjaWhitespace, TrimBlocksRemovesOneNewlineAfterATag) {
  EXPECT_EQ(r("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(r("{% if true %}\n\nA{% endif %}"), "\nA");  // only one newline
  EXPECT_EQ(r("{{ 'x' }}\nA"), "x\nA");                  // not after {{ }}
  EXPECT_EQ(r("{# c #}\nA"), "A");                       // comments too
}

TEST(JinjaWhitespace, LstripBlocksRemovesIndentBeforeBlockTags) {
  EXPECT_EQ(r("  {% if true %}\n  X\n  {% endif %}\nY"), "  X\nY");
  EXPECT_EQ(r("a  {% if true %}b{% endif %}"), "a  b");   // not at line start
  EXPECT_EQ(r("  {{ 'v' }}"), "  v");                     // not before {{ }}
  EXPECT_EQ(r("\t {%+ if true %}x{% endif %}"), "\t x");  // + disables it
}

TEST(JinjaWhitespace, MinusStripsAllWhitespaceIncludingNewlines) {
  EXPECT_EQ(r("a \n\t {%- if true -%} \n b{% endif %}"), "ab");
  EXPECT_EQ(r("a\n  {{- 'x' -}}\n  b"), "axb");
  EXPECT_EQ(r("a {#- c -#} b"), "ab");
  // Python's str.rstrip() strips Unicode spaces too (U+3000 ideographic space).
  EXPECT_EQ(r("a\xe3\x80\x80{{- 'b' }}"), "ab");
}

TEST(JinjaWhitespace, NewlinesAreNormalisedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(r("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(r("a\n\n"), "a\n");
  EXPECT_EQ(r("{{ 'x\r\ny' }}"), "x\ny");  // inside string literals as well
}

TEST(JinjaWhitespace, RawBlocks) {
  EXPECT_EQ(r("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(r("{% raw %}\nA{% endraw %}\nB"), "\nAB");  // no trim after raw, trim after endraw
}

TEST(JinjaValues, PythonStrOfValues) {
  EXPECT_EQ(r("{{ none }} {{ true }} {{ 3 }} {{ 3.0 }} {{ 2.5e-7 }} {{ 1e16 }} {{ 123456.789 }}"),
            "None True 3 3.0 2.5e-07 1e+16 123456.789");
  EXPECT_EQ(r("{{ ['a', \"b'c\", 1, none, [true]] }}"), "['a', \"b'c\", 1, None, [True]]");
  EXPECT_EQ(r("{{ {'k': 'v', 2: (1,)} }}"), "{'k': 'v', 2: (1,)}");
  EXPECT_EQ(r("{{ x }}", {{"x", j(R"({"b": [1.5, null], "a": "\n"})")}}),
            "{'a': '\\n', 'b': [1.5, None]}");
}

TEST(JinjaValues, FloatReprMatchesPython) {
  EXPECT_EQ(py_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(1.0 / 0.0), "inf");
}

TEST(JinjaValues, IntegerAndFloatArithmetic) {
  EXPECT_EQ(
      r("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 7 }} {{ 2 ** 3 ** 2 }} {{ 2 ** -1 }}"),
      "3 -4 2 1.0 64 0.5");
  EXPECT_EQ(r("{{ 1 + 2 * 3 - 4 / 2 }}"), "5.0");
  EXPECT_THROW(r("{{ 2 ** 64 }}"), InvalidArgument);  // beyond 64 bits
}

TEST(JinjaValues, UndefinedSemantics) {
  EXPECT_EQ(r("[{{ x }}][{{ x | length }}][{% for i in x %}i{% endfor %}][{{ x is defined }}]"),
            "[][0][][False]");
  EXPECT_THROW(r("{{ x.y }}"), InvalidArgument);
  EXPECT_THROW(r("{{ x + 1 }}"), InvalidArgument);
  EXPECT_THROW(r("{{ x() }}"), InvalidArgument);
  EXPECT_EQ(r("{{ d.missing }}|{{ d.missing is defined }}", {{"d", j("{}")}}), "|False");
}

TEST(JinjaExpressions, AttributeAndItemLookup) {
  Vars v = {{"m", j(R"({"role": "user", "items": 5})")}, {"xs", j("[10, 20, 30]")}};
  EXPECT_EQ(r("{{ m.role }} {{ m['role'] }} {{ m['items'] }} {{ xs[-1] }} {{ xs.0 }}", v),
            "user user 5 30 10");
  // Python getattr first: m.items is the dict method, not the key.
  EXPECT_EQ(r("{{ m.items() | list | length }}", v), "2");
  EXPECT_EQ(r("{{ xs[1:] }} {{ xs[::-1] }} {{ 'héllo'[1:4] }}", v), "[20, 30] [30, 20, 10] éll");
}

TEST(JinjaExpressions, OperatorsAndTests) {
  EXPECT_EQ(r("{{ 'a' ~ 1 ~ none }} {{ 'ab' in 'cabd' }} {{ 2 not in [1] }} {{ 1 < 2 < 3 }}"),
            "a1None True True True");
  EXPECT_EQ(r("{{ 0 or 'x' }} {{ 'a' and '' }}|{{ 'y' if 0 else 'n' }}"), "x |n");
  EXPECT_EQ(r("{{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'x' is string }} {{ 1.0 is integer }} "
              "{{ true is number }}"),
            "True True True False True");
}

TEST(JinjaStatements, ForLoopVariables) {
  EXPECT_EQ(r("{% for x in 'ab' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last "
              "}} {% endfor %}"),
            "11TrueFalse 20FalseTrue ");
  EXPECT_EQ(
      r("{% for x in [1, 2, 3] if x != 2 %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}"),
      "1/2 3/2 ");
  EXPECT_EQ(r("{% for k, v in {'a': 1}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1");
  EXPECT_EQ(r("{% for i in range(9) %}{% if i > 3 %}{% break %}{% endif %}{% if i is odd %}{% "
              "continue %}{% endif %}{{ i }}{% endfor %}"),
            "02");
}

TEST(JinjaStatements, ScopingFollowsJinja2) {
  // Loop bodies get a fresh scope per iteration; if blocks share their parent's.
  EXPECT_EQ(r("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 5 %}{% endfor %}{{ x }}"),
            "111");
  EXPECT_EQ(r("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
  EXPECT_EQ(r("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% "
              "endfor %}{{ ns.n }}"),
            "3");
}

TEST(JinjaStatements, Macros) {
  EXPECT_EQ(r("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, "
              "a=4) }}"),
            "1B1243");
  EXPECT_EQ(r("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"),
            "[in]");
  EXPECT_EQ(r("{% set x %}a{{ 1 }}{% endset %}{{ x }}|{% filter upper %}b{% endfilter %}"), "a1|B");
}

TEST(JinjaFilters, CommonFilters) {
  EXPECT_EQ(r("{{ '  a  ' | trim }}|{{ [3, 1] | sort | join(',') }}|{{ 'hi there' | title }}|{{ "
              "'x\ny' | indent(2) }}"),
            "a|1,3|Hi There|x\n  y");
  EXPECT_EQ(r("{{ x | default('d') }} {{ '' | default('d', true) }} {{ [1, 2] | length }} {{ '3' | "
              "int + 1 }}"),
            "d d 2 4");
  Vars v = {{"ms", j(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])")}};
  EXPECT_EQ(
      r("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }}", v),
      "u");
  EXPECT_EQ(r("{{ ms | rejectattr('role', 'eq', 'user') | list | length }}", v), "1");
}

TEST(JinjaFilters, TojsonAsTransformersDefinesIt) {
  // ensure_ascii=False, separators (', ', ': ') without indent and (',', ': ') with.
  EXPECT_EQ(r("{{ {'b': 'é', 'a': [1, 2.0, none]} | tojson }}"),
            "{\"b\": \"é\", \"a\": [1, 2.0, null]}");
  EXPECT_EQ(r("{{ [1, {'k': true}] | tojson(indent=2) }}"),
            "[\n  1,\n  {\n    \"k\": true\n  }\n]");
  EXPECT_EQ(r("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"), "{\"a\": 2, \"b\": 1}");
  EXPECT_EQ(r("{{ 'é\"<' | tojson }}"), "\"é\\\"<\"");  // no HTML escaping
}

TEST(JinjaGlobals, StrftimeNowUsesTheClock) {
  RenderOptions opt;
  opt.now = 1721952000;  // 2024-07-26 00:00:00 UTC
  setenv("TZ", "UTC", 1);
  tzset();
  EXPECT_EQ(Template::parse("{{ strftime_now('%d %b %Y') }}").render({}, opt), "26 Jul 2024");
  EXPECT_EQ(Template::parse("{{ strftime_now('%Y-%m-%d') }}").render({}, opt), "2024-07-26");
}

TEST(JinjaGlobals, RaiseExceptionCarriesTheMessage) {
  try {
    r("a\n{{ raise_exception('Roles must alternate') }}");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "template error at line 2: Roles must alternate");
  }
}

TEST(JinjaParse, DoStatementIsOptional) {
  EXPECT_THROW(Template::parse("{% do 1 %}"), InvalidArgument);  // as in transformers
  ParseOptions opt;
  opt.do_statement = true;
  EXPECT_EQ(Template::parse("{% set ns = namespace(a=1) %}{% do ns.a %}{{ ns.a }}", opt).render({}),
            "1");
}

TEST(JinjaParse, ThreadSafeRendering) {
  auto t = Template::parse("{% for i in range(n) %}{{ i }}{% endfor %}");
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 200; ++rep) {
        std::string want;
        for (int i = 0; i < k + 3; ++i) want += std::to_string(i);
        if (t.render({{"n", Value::integer(k + 3)}}) != want) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace tachyon::jinja
