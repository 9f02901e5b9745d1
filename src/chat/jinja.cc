#include "chat/jinja.h"

#include "core/error.h"

namespace tachyon::jinja {

namespace {

// Filter and test names jinja2 knows: a template naming any other fails to
// compile there, so it fails to parse here too.
bool jinja2_knows_filter(std::string_view n) {
  static constexpr std::string_view kOthers[] = {"filesizeformat", "groupby",   "pprint",
                                                 "random",         "urlencode", "urlize",
                                                 "wordwrap",       "xmlattr",   "slice"};
  if (find_filter(n)) return true;
  for (auto o : kOthers)
    if (o == n) return true;
  return false;
}

// jinja2 rejects unknown filter/test names when compiling, except inside an if
// statement's own frame or an inline if-expression, where the error waits until the
// filter runs ("soft" frames).
void check_names(Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (e->kind == ExprKind::kFilter) e->filter_fn = find_filter(e->name);
  if (e->kind == ExprKind::kTest) e->test_fn = find_test(e->name);
  if (!soft && e->kind == ExprKind::kFilter && !jinja2_knows_filter(e->name))
    throw TemplateError{fmt::format("No filter named '{}'.", e->name), e->line};
  if (!soft && e->kind == ExprKind::kTest && !find_test(e->name))
    throw TemplateError{fmt::format("No test named '{}'.", e->name), e->line};
  for (auto& c : e->args) check_names(c.get(), soft);
  for (auto& c : e->call.args) check_names(c.get(), soft);
  for (auto& kv : e->call.kwargs) check_names(kv.second.get(), soft);
  check_names(e->call.dyn_args.get(), soft);
  check_names(e->call.dyn_kwargs.get(), soft);
}

void check_names(Body& body, bool soft) {
  for (auto& s : body) {
    bool here = soft || s->kind == StmtKind::kIf;
    bool inner = s->kind == StmtKind::kIf
                     ? true
                     : (s->kind == StmtKind::kSetBlock || s->kind == StmtKind::kScope) && soft;
    check_names(s->expr.get(), here);
    check_names(s->cond.get(), false);
    for (auto& v : s->with_values) check_names(v.get(), soft);
    check_names(s->body, inner);
    check_names(s->else_body, s->kind == StmtKind::kIf || (s->kind != StmtKind::kFor && soft));
    if (s->macro) {
      for (auto& d : s->macro->defaults) check_names(d.get(), false);
      check_names(s->macro->body, false);
    }
  }
}

}  // namespace

Template Template::parse(std::string_view source, const ParseOptions& options) {
  Template t;
  try {
    t.program_ = parse_template(source, options);
    // The tree is not shared yet: resolve filter/test names in place.
    check_names(const_cast<Program&>(*t.program_).body, false);
  } catch (const TemplateError& e) {
    if (e.column > 0)
      raise<InvalidArgument>("template syntax error at line {}, column {}: {}", e.line, e.column,
                             e.message);
    raise<InvalidArgument>("template syntax error at line {}: {}", e.line, e.message);
  }
  return t;
}

std::string Template::render(const Vars& vars, const RenderOptions& options) const {
  return render_marked(vars, options).take_text();
}

MarkedString Template::render_marked(const Vars& vars, const RenderOptions& options) const {
  Interpreter in(program_, options);
  try {
    return in.render(vars);
  } catch (const TemplateError& e) {
    raise<InvalidArgument>("template error at line {}: {}", e.line, e.message);
  }
}

}  // namespace tachyon::jinja
