// Hostile templates: each must end in an error or a correct answer quickly, never a
// crash, a hang or unbounded memory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "chat/chat_template.h"
#include "chat/jinja.h"
#include "core/error.h"

namespace tachyon::jinja {
namespace {

std::string render(const std::string& src, const RenderOptions& opt = {}) {
  return Template::parse(src).render({}, opt);
}

void expect_error(const std::string& src, const std::string& fragment,
                  const RenderOptions& opt = {}) {
  try {
    std::string out = render(src, opt);
    ADD_FAILURE() << "expected an error containing '" << fragment << "', got output of "
                  << out.size() << " bytes";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(JinjaHostile, DeeplyNestedParentheses) {
  for (int depth : {1000, 100000}) {
    std::string src = "{{ " + std::string(depth, '(') + "1" + std::string(depth, ')') + " }}";
    expect_error(src, "nesting");
  }
  // Moderate nesting is fine.
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}"), "1");
}

TEST(JinjaHostile, DeeplyNestedStructures) {
  expect_error("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}", "nesting");
  expect_error("{{ " + std::string(100000, '-') + "1 }}", "nesting");
  std::string nots;
  for (int i = 0; i < 100000; ++i) nots += "not ";
  expect_error("{{ " + nots + "1 }}", "nesting");
  std::string ifs, ends;
  for (int i = 0; i < 100000; ++i) {
    ifs += "{% if true %}";
    ends += "{% endif %}";
  }
  expect_error(ifs + ends, "nesting");
}

// Copying a growing dict in a loop is quadratic work: it counts against the same
// budgets as lists and strings, so it ends in an error instead of running for minutes.
TEST(JinjaHostile, GrowingDictCopies) {
  expect_error(
      "{% set ns = namespace(d={}) %}{% for i in range(100000) %}"
      "{% set ns.d = dict(ns.d, **{('k' ~ i): i}) %}{% endfor %}{{ ns.d | length }}",
      "limit");
  expect_error(
      "{% set ns = namespace(d={}) %}{% for i in range(100000) %}"
      "{% set ns.d = dict(ns.d.items() | list + [(i, i)]) %}{% endfor %}",
      "limit");
  // A dict built once, and a small one copied often, stay fine.
  EXPECT_EQ(render("{% set ns = namespace(d={}) %}{% for i in range(200) %}"
                   "{% set ns.d = dict(ns.d, **{('k' ~ i): i}) %}{% endfor %}{{ ns.d | length }}"),
            "200");
}

// A render in progress ends when its caller cancels it or its deadline passes.
TEST(JinjaHostile, RendersCanBeCancelledAndTimed) {
  const std::string slow =
      "{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}done";
  std::atomic<bool> cancel{true};
  RenderOptions opt;
  opt.cancel = &cancel;
  expect_error(slow, "cancelled", opt);
  opt.cancel = nullptr;
  opt.deadline = std::chrono::steady_clock::now();
  expect_error(slow, "time limit", opt);
  // Set while the render runs, from another thread.
  cancel = false;
  opt = RenderOptions{};
  opt.cancel = &cancel;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    cancel = true;
  });
  expect_error(slow + slow + slow, "cancelled", opt);
  stopper.join();
  cancel = false;
  EXPECT_EQ(render("{% for i in range(10) %}{% endfor %}ok", opt), "ok");
}

TEST(JinjaHostile, LongFlatChains) {
  // Left-leaning trees built by loops in the parser are bounded too.
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  expect_error(sum + " }}", "nesting");
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 100000; ++i) filters += "|upper";
  expect_error(filters + " }}", "nesting");
  std::string attrs = "{{ x";
  for (int i = 0; i < 100000; ++i) attrs += ".a";
  expect_error(attrs + " }}", "nesting");
  // A long but flat ~ chain is one node.
  std::string cat = "{{ 'a'";
  for (int i = 0; i < 10000; ++i) cat += "~'a'";
  EXPECT_EQ(render(cat + " }}").size(), 10001u);
}

TEST(JinjaHostile, HugeRangesFailFast) {
  expect_error("{% for i in range(10**12) %}x{% endfor %}", "Range too big");
  expect_error("{{ range(10**9) | length }}", "Range too big");
  expect_error("{{ range(-(10**18), 10**18) | list }}", "Range too big");
  expect_error("{{ range(0, 10**18, 1) | list }}", "Range too big");
}

TEST(JinjaHostile, NestedLoopsHitTheStepLimit) {
  RenderOptions opt;
  opt.limits.max_steps = 1'000'000;
  expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
               "evaluation steps", opt);
}

TEST(JinjaHostile, RecursiveMacros) {
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion");
  expect_error("{% macro f() %}{{ f() ~ f() }}{% endmacro %}{{ f() }}", "recursion");
  // Mutual recursion through a namespace-held macro.
  expect_error(
      "{% set ns = namespace() %}{% macro a() %}{{ ns.b() }}{% endmacro %}"
      "{% macro b() %}{{ a() }}{% endmacro %}{% set ns.b = b %}{{ a() }}",
      "recursion");
  // Bounded recursion is fine.
  EXPECT_EQ(
      render("{% macro f(n) %}{% if n %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
      "54321");
}

TEST(JinjaHostile, RecursiveLoopsAreBounded) {
  // A recursive loop over a self-similar structure stops at the depth limit.
  expect_error(
      "{% set ns = namespace(x=[1]) %}{% for i in ns.x recursive %}{{ loop(ns.x) }}{% endfor %}",
      "recursion");
}

TEST(JinjaHostile, HugeStrings) {
  expect_error("{{ 'x' * 10**9 }}", "exceeds the limit");
  expect_error("{{ 'x' * 10**18 }}", "exceeds the limit");
  expect_error("{{ [1] * 10**9 }}", "exceeds the limit");
  expect_error("{{ ('x' * 10**7) | center(10**9) }}", "exceeds the limit");
  expect_error("{{ ('ab' * 1000) | replace('a', 'x' * 100000) }}", "exceeds the limit");
  // Doubling through a namespace runs into the string limit, not out of memory.
  expect_error(
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor %}",
      "exceeds the limit");
}

TEST(JinjaHostile, RetainedValuesAreBudgeted) {
  // Many large strings kept alive at once: bounded by the per-render byte budget.
  expect_error(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
      "{% set ns.l = ns.l + ['x' * 1000000] %}{% endfor %}",
      "bytes of values");
  expect_error(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
      "{% set ns.l = ns.l + [i] %}{% endfor %}",
      "limit");
  expect_error("{{ '%*d' % (10**9, 1) }}{{ 'ab'.center(2**62, 'x') }}", "limit");
}

TEST(JinjaHostile, OutputLimit) {
  RenderOptions opt;
  opt.limits.max_output_bytes = 1000;
  expect_error("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}", "output exceeds", opt);
}

TEST(JinjaHostile, DeepValueNesting) {
  expect_error(
      "{% set ns = namespace(x=[]) %}{% for i in range(10000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}{{ ns.x }}",
      "nesting too deep");
}

TEST(JinjaHostile, PythonInternalsAreUnreachable) {
  // Unsafe attributes are undefined (printing nothing, as jinja2's sandbox does);
  // going further is an error.
  EXPECT_EQ(render("{{ ''.__class__ }}{{ [].__len__ }}{{ range.__self__ }}"), "");
  expect_error("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe");
  expect_error("{{ cycler.__init__.__globals__ }}", "unsafe");
  expect_error("{{ namespace.__class__ }}{{ lipsum.__globals__['os'] }}", "undefined");
  expect_error("{{ self.__init__ }}", "undefined");
  expect_error("{{ [].append(1) }}", "unsafe");
  expect_error("{{ {}.update({'a': 1}) }}", "unsafe");
  expect_error("{{ {}.setdefault('a', 1) }}", "unsafe");
}

TEST(JinjaHostile, MalformedSources) {
  for (std::string src : std::vector<std::string>{
           "{{", "{%", "{#", "{{ 'unterminated }}", "{% for %}", "{% if %}{% endfor %}", "{{ )) }}",
           "{% raw %}never closed", "{{ 1 + }}", "{% set %}", "{% macro %}", "{{ 'a' | }}",
           "{{ x is }}", "{{ [1, }}", "{{ {1: } }}", std::string("\xff\xfe"), "{{ '\\x4' }}",
           "{{ 99999999999999999999999 }}"}) {
    EXPECT_THROW(Template::parse(src), InvalidArgument) << src;
  }
}

TEST(JinjaHostile, ErrorsNameTheLine) {
  try {
    render("line1\n{{ 'a' }}\n{{ 1 + 'x' }}\n");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
  try {
    Template::parse("ok\n\n  {% if %}");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("line 3, column 9"), std::string::npos) << e.what();
  }
  try {
    ChatTemplate::compile("{{ raise_exception('bad role') }}").render(ChatTemplateInputs{});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("line 1: bad role"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tachyon::jinja
