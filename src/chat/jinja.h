// A Jinja template engine that renders as jinja2 does (the environment transformers
// uses for chat templates: sandboxed, trim_blocks, lstrip_blocks, loop controls).
//
//   auto t = jinja::Template::parse("Hello {{ name | upper }}!");
//   t.render({{"name", jinja::Value::string("world")}});  // "Hello WORLD!"
//
// Supported: all statements of jinja2 except template inheritance/inclusion
// (if/elif/else, for with loop.*, else, filters and recursion, set incl. block set and
// namespace attributes, macro with defaults/varargs/kwargs/caller, call, filter, with,
// raw, break/continue, comments, whitespace control; `do` when ParseOptions.do_statement
// is set, off by default as transformers does not enable jinja2.ext.do); the expression grammar
// with jinja2's precedence; Python semantics for values, arithmetic, comparisons, str() and repr();
// the filters abs attr batch capitalize center count d default dictsort e escape first float
// forceescape format indent int items join last length list lower map max min reject rejectattr
// replace reverse round safe select selectattr sort string striptags sum title tojson trim truncate
// unique upper wordcount; all of jinja2's tests; str/list/dict methods; globals range dict
// namespace cycler joiner raise_exception strftime_now. Not supported: groupby, pprint, urlize,
// wordwrap, xmlattr, filesizeformat, random, urlencode, lipsum, integers beyond 64 bits, HTML
// autoescaping/Markup.
//
// Untrusted input: strings given through from_json(..., untrusted=true) carry the byte
// spans that came from it through the render (see jinja_value.h); render_marked() returns
// the output's spans.
//
// Errors (syntax, runtime, limits) are InvalidArgument naming the line.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_value.h"

namespace tachyon::jinja {

using Vars = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  // Throws InvalidArgument("template syntax error at line L, column C: ...").
  static Template parse(std::string_view source, const ParseOptions& options = {});

  // Thread-safe. Throws InvalidArgument("template error at line L: ...").
  std::string render(const Vars& vars, const RenderOptions& options = {}) const;
  // The same text, with the spans of it that came from untrusted values (see
  // from_json and MarkedString).
  MarkedString render_marked(const Vars& vars, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace tachyon::jinja
