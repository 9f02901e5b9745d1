#include "chat/jinja_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <set>

namespace tachyon::jinja {

namespace {

bool is_reserved_const(std::string_view n) {
  return n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None";
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const ParseOptions& opt) : t_(std::move(toks)), opt_(opt) {}

  std::shared_ptr<const Program> run() {
    auto prog = std::make_shared<Program>();
    prog->body = subparse({});
    if (cur().type != Tok::kEof) error(fmt::format("unexpected '{}'", describe(cur())));
    return prog;
  }

 private:
  // ---- token helpers
  const Token& cur() const { return t_[i_]; }
  const Token& peek() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void error(const std::string& msg) const {
    throw TemplateError{msg, cur().line, cur().column};
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) unexpected(std::string(op));
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    if (cur().type == Tok::kEof) error(fmt::format("unexpected end of template, expected '{}'.", wanted));
    error(fmt::format("expected token '{}', got '{}'", wanted, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) unexpected("name");
    std::string n = cur().text;
    next();
    return n;
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) unexpected(what);
    next();
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.opt_.max_depth)
        p.error(fmt::format("template nesting is deeper than the limit of {}", p.opt_.max_depth));
    }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  // Records the subtree height; deep left-leaning chains (a+a+a+...) are bounded too.
  ExprPtr finish(ExprPtr e) {
    int d = 0;
    auto see = [&](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    for (const auto& c : e->args) see(c);
    for (const auto& c : e->call.args) see(c);
    for (const auto& kv : e->call.kwargs) see(kv.second);
    see(e->call.dyn_args);
    see(e->call.dyn_kwargs);
    e->depth = d + 1;
    if (e->depth > opt_.max_depth)
      error(fmt::format("expression nesting is deeper than the limit of {}", opt_.max_depth));
    return e;
  }

  // ---- statements
  // Parses until a block tag whose name is in `end_names` (left current) or EOF.
  Body subparse(std::initializer_list<std::string_view> end_names) {
    std::vector<std::string_view> ends(end_names);
    Body body;
    while (cur().type != Tok::kEof) {
      const Token& tok = cur();
      if (tok.type == Tok::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == Tok::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = cur().line;
        s->expr = parse_tuple(true, {}, false);
        expect(Tok::kVarEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (tok.type == Tok::kBlockBegin) {
        next();
        if (cur().type == Tok::kName &&
            std::find(ends.begin(), ends.end(), cur().text) != ends.end())
          return body;
        parse_statement(body);
        expect(Tok::kBlockEnd, "end of statement block");
      } else {
        error(fmt::format("unexpected '{}'", describe(tok)));
      }
    }
    if (!ends.empty()) {
      std::string want;
      for (auto e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      error(fmt::format("Unexpected end of template. Jinja was looking for the following tags: {}. "
                        "The innermost block that needs to be closed is '{}'.",
                        want, block_stack_.empty() ? "" : block_stack_.back()));
    }
    return body;
  }

  // `{% tag ... %}` body up to one of `ends`; the end tag's name is left current.
  Body statements(std::initializer_list<std::string_view> ends, bool drop_needle) {
    skip_op(":");
    expect(Tok::kBlockEnd, "end of statement block");
    Body b = subparse(ends);
    if (drop_needle) next();
    return b;
  }

  void parse_statement(Body& out) {
    DepthGuard g(*this);
    if (cur().type != Tok::kName) error("tag name expected");
    std::string tag = cur().text;
    int line = cur().line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    block_stack_.push_back(tag);
    if (tag == "if") {
      parse_if(*s);
    } else if (tag == "for") {
      parse_for(*s);
    } else if (tag == "set") {
      parse_set(*s);
    } else if (tag == "macro") {
      parse_macro(*s);
    } else if (tag == "call") {
      parse_call_block(*s);
    } else if (tag == "filter") {
      next();
      s->kind = StmtKind::kFilterBlock;
      s->expr = parse_filter(nullptr, true);
      s->body = statements({"endfilter"}, true);
    } else if (tag == "with") {
      parse_with(*s);
    } else if (tag == "print") {
      // {% print a, b %} outputs each expression in turn.
      next();
      s->kind = StmtKind::kScope;
      while (cur().type != Tok::kBlockEnd) {
        if (!s->body.empty()) expect_op(",");
        auto o = std::make_unique<Stmt>();
        o->kind = StmtKind::kOutput;
        o->line = cur().line;
        o->expr = parse_expression(true);
        s->body.push_back(std::move(o));
      }
    } else if ((tag == "break" || tag == "continue") && opt_.loop_controls) {
      next();
      if (loop_depth_ == 0) error(fmt::format("'{}' outside loop", tag));
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else if (tag == "do" && opt_.do_statement) {
      next();
      s->kind = StmtKind::kDo;
      s->expr = parse_tuple(true, {}, false);
    } else if (tag == "generation") {
      next();
      s->kind = StmtKind::kScope;
      s->body = statements({"endgeneration"}, true);
    } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" ||
               tag == "from" || tag == "autoescape") {
      error(fmt::format("the '{}' tag is not supported in chat templates", tag));
    } else {
      error(fmt::format("Encountered unknown tag '{}'.", tag));
    }
    block_stack_.pop_back();
    out.push_back(std::move(s));
  }

  void parse_if(Stmt& s) {
    next();
    s.kind = StmtKind::kIf;
    s.expr = parse_tuple(false, {}, false);
    s.body = statements({"elif", "else", "endif"}, false);
    std::string end = cur().text;
    next();
    if (end == "elif") {
      auto inner = std::make_unique<Stmt>();
      inner->line = cur().line;
      inner->kind = StmtKind::kIf;
      // Re-enter as if this were `{% if ... %}`: parse_if expects the tag name.
      --i_;
      parse_if(*inner);
      s.else_body.push_back(std::move(inner));
      return;
    }
    if (end == "else") s.else_body = statements({"endif"}, true);
  }

  void parse_for(Stmt& s) {
    next();
    s.kind = StmtKind::kFor;
    s.target = parse_assign_target(true, false, {"in"});
    if (!skip_name("in")) unexpected("in");
    s.expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s.cond = parse_expression(true);
    s.recursive = skip_name("recursive");
    ++loop_depth_;
    s.body = statements({"endfor", "else"}, false);
    --loop_depth_;
    std::string end = cur().text;
    next();
    if (end == "else") s.else_body = statements({"endfor"}, true);
  }

  void parse_set(Stmt& s) {
    next();
    s.target = parse_assign_target(true, true, {});
    if (skip_op("=")) {
      s.kind = StmtKind::kSet;
      s.expr = parse_tuple(true, {}, false);
      return;
    }
    s.kind = StmtKind::kSetBlock;
    if (is_op("|")) s.expr = parse_filter(nullptr, false);
    s.body = statements({"endset"}, true);
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      std::string name = expect_name();
      if (is_reserved_const(name)) error(fmt::format("can't assign to '{}'", name));
      if (skip_op("=")) {
        m.defaults.push_back(parse_expression(true));
      } else if (!m.defaults.empty()) {
        error("non-default argument follows default argument");
      }
      m.params.push_back(std::move(name));
    }
    expect_op(")");
  }

  void parse_macro(Stmt& s) {
    next();
    s.kind = StmtKind::kMacro;
    s.macro = std::make_shared<MacroDef>();
    s.macro->name = expect_name();
    parse_signature(*s.macro);
    macro_body(*s.macro, {"endmacro"});
  }

  void macro_body(MacroDef& m, std::initializer_list<std::string_view> ends) {
    std::set<std::string> names;
    name_sinks_.push_back(&names);
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    m.body = statements(ends, true);
    loop_depth_ = saved_loops;
    name_sinks_.pop_back();
    m.uses_varargs = names.count("varargs") > 0;
    m.uses_kwargs = names.count("kwargs") > 0;
    m.uses_caller = names.count("caller") > 0;
  }

  void parse_call_block(Stmt& s) {
    next();
    s.kind = StmtKind::kCallBlock;
    s.macro = std::make_shared<MacroDef>();
    s.macro->name = "caller";
    if (is_op("(")) parse_signature(*s.macro);
    s.expr = parse_expression(true);
    if (s.expr->kind != ExprKind::kCall) error("expected call");
    macro_body(*s.macro, {"endcall"});
  }

  void parse_with(Stmt& s) {
    next();
    s.kind = StmtKind::kWith;
    while (cur().type != Tok::kBlockEnd) {
      if (!s.with_targets.empty()) expect_op(",");
      s.with_targets.push_back(parse_assign_target(true, false, {}));
      expect_op("=");
      s.with_values.push_back(parse_expression(true));
    }
    s.body = statements({"endwith"}, true);
  }

  Target parse_assign_target(bool with_tuple, bool with_namespace,
                             std::initializer_list<std::string_view> extra_end) {
    if (with_namespace && cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
      Target t;
      t.kind = Target::Kind::kNsAttr;
      t.name = expect_name();
      next();
      t.attr = expect_name();
      return t;
    }
    auto single = [&]() {
      Target t;
      if (cur().type != Tok::kName) {
        if (is_op("(")) {
          next();
          Target inner = parse_assign_target(true, false, {});
          expect_op(")");
          return inner;
        }
        error(fmt::format("can't assign to '{}'", describe(cur())));
      }
      t.name = expect_name();
      if (is_reserved_const(t.name)) error(fmt::format("can't assign to '{}'", t.name));
      return t;
    };
    Target first = single();
    if (!with_tuple || !is_op(",")) return first;
    Target tup;
    tup.kind = Target::Kind::kTuple;
    tup.items.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == Tok::kBlockEnd || (cur().type == Tok::kName &&
          std::find(extra_end.begin(), extra_end.end(), cur().text) != extra_end.end()) || is_op("="))
        break;
      tup.items.push_back(single());
    }
    return tup;
  }

  // ---- expressions
  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard g(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      next();
      ExprPtr test = parse_or();
      ExprPtr other;
      if (skip_name("else")) other = parse_condexpr();
      auto c = node(ExprKind::kCondExpr, line);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(other));
      e = finish(std::move(c));
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = node(op == "~" ? ExprKind::kConcat : ExprKind::kBinary, line);
    b->op = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return finish(std::move(b));
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      int line = cur().line;
      next();
      auto u = node(ExprKind::kUnary, line);
      u->op = "not";
      u->args.push_back(parse_not());
      return finish(std::move(u));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, line);
        cmp->args.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? finish(std::move(cmp)) : std::move(e);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      next();
      l = binary(op, std::move(l), parse_concat(), line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = node(ExprKind::kConcat, line);
    c->args.push_back(std::move(first));
    while (skip_op("~")) c->args.push_back(parse_math2());
    return finish(std::move(c));
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      next();
      l = binary(op, std::move(l), parse_pow(), line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      next();
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      std::string op = cur().text;
      next();
      e = node(ExprKind::kUnary, line);
      e->op = op;
      e->args.push_back(parse_unary(false));
      e = finish(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    if (tok.type == Tok::kName) {
      std::string n = tok.text;
      next();
      if (n == "true" || n == "True" || n == "false" || n == "False") {
        auto c = node(ExprKind::kConst, line);
        c->value = Value::boolean(n[0] == 't' || n[0] == 'T');
        return c;
      }
      if (n == "none" || n == "None") {
        auto c = node(ExprKind::kConst, line);
        c->value = Value::none();
        return c;
      }
      if (!name_sinks_.empty()) name_sinks_.back()->insert(n);
      auto e = node(ExprKind::kName, line);
      e->name = std::move(n);
      return e;
    }
    if (tok.type == Tok::kString) {
      std::string s = tok.text;
      next();
      while (cur().type == Tok::kString) {  // adjacent literals concatenate
        s += cur().text;
        next();
      }
      auto c = node(ExprKind::kConst, line);
      c->value = Value::string(std::move(s));
      return c;
    }
    if (tok.type == Tok::kInt || tok.type == Tok::kFloat) {
      auto c = node(ExprKind::kConst, line);
      c->value = tok.type == Tok::kInt ? Value::integer(tok.int_value) : Value::floating(tok.float_value);
      next();
      return c;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = node(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!l->args.empty()) expect_op(",");
        if (is_op("]")) break;
        l->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return finish(std::move(l));
    }
    if (is_op("{")) {
      next();
      auto d = node(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!d->args.empty()) expect_op(",");
        if (is_op("}")) break;
        d->args.push_back(parse_expression(true));
        expect_op(":");
        d->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return finish(std::move(d));
    }
    if (tok.type == Tok::kEof) error("unexpected end of template, expected an expression.");
    error(fmt::format("unexpected '{}'", describe(tok)));
  }

  bool is_tuple_end(std::initializer_list<std::string_view> extra) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
    return cur().type == Tok::kName && std::find(extra.begin(), extra.end(), cur().text) != extra.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) error(fmt::format("Expected an expression, got '{}'", describe(cur())));
    }
    auto t = node(ExprKind::kTuple, line);
    t->args = std::move(items);
    return finish(std::move(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e), false);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr e) {
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == Tok::kName) {
        auto g = node(ExprKind::kGetattr, line);
        g->name = cur().text;
        next();
        g->args.push_back(std::move(e));
        return finish(std::move(g));
      }
      if (cur().type == Tok::kInt) {
        auto g = node(ExprKind::kGetitem, line);
        auto idx = node(ExprKind::kConst, line);
        idx->value = Value::integer(cur().int_value);
        next();
        g->args.push_back(std::move(e));
        g->args.push_back(std::move(idx));
        return finish(std::move(g));
      }
      error("expected name or number");
    }
    expect_op("[");
    std::vector<ExprPtr> subs;
    while (!is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr arg;
    if (subs.size() == 1) {
      arg = std::move(subs[0]);
    } else {
      arg = node(ExprKind::kTuple, line);
      arg->args = std::move(subs);
      arg = finish(std::move(arg));
    }
    if (arg && arg->kind == ExprKind::kSlice) {  // e[a:b:c]
      arg->args.insert(arg->args.begin(), std::move(e));
      return finish(std::move(arg));
    }
    auto g = node(ExprKind::kGetitem, line);
    g->args.push_back(std::move(e));
    g->args.push_back(std::move(arg));
    return finish(std::move(g));
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      parts.push_back(parse_expression(true));
    } else {
      parts.push_back(nullptr);
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) {
        parts.push_back(parse_expression(true));
      } else {
        parts.push_back(nullptr);
      }
    } else {
      parts.push_back(nullptr);
    }
    auto s = node(ExprKind::kSlice, line);
    s->args = std::move(parts);
    return finish(std::move(s));
  }

  void parse_call_args(CallSpec& c) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        next();
        c.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        next();
        c.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        if (c.dyn_kwargs) error("Invalid argument syntax");
        std::string key = cur().text;
        next();
        next();
        c.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (c.dyn_args || c.dyn_kwargs || !c.kwargs.empty()) error("Invalid argument syntax");
        c.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = node(ExprKind::kCall, cur().line);
    parse_call_args(c->call);
    c->args.push_back(std::move(callee));
    return finish(std::move(c));
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr e, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto f = node(ExprKind::kFilter, cur().line);
      f->name = dotted_name();
      if (is_op("(")) parse_call_args(f->call);
      f->args.push_back(std::move(e));
      e = finish(std::move(f));
    }
    return e;
  }

  ExprPtr parse_test(ExprPtr e) {
    int line = cur().line;
    next();  // 'is'
    bool negated = skip_name("not");
    auto t = node(ExprKind::kTest, line);
    t->name = dotted_name();
    if (is_op("(")) {
      parse_call_args(t->call);
    } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                cur().type == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) error("You cannot chain multiple tests with is");
      ExprPtr arg = parse_primary();
      t->call.args.push_back(parse_postfix(std::move(arg)));
    }
    t->args.push_back(std::move(e));
    ExprPtr out = finish(std::move(t));
    if (negated) {
      auto n = node(ExprKind::kUnary, line);
      n->op = "not";
      n->args.push_back(std::move(out));
      out = finish(std::move(n));
    }
    return out;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  ParseOptions opt_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> block_stack_;
  std::vector<std::set<std::string>*> name_sinks_;
};

}  // namespace

std::shared_ptr<const Program> parse_template(std::string_view source, const ParseOptions& options) {
  return Parser(tokenize(source, options.lexer), options).run();
}

}  // namespace tachyon::jinja
