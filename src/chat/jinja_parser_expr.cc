// Expressions, with jinja2's precedence: condexpr < or < and < not < compare < +/- <
// ~ < * / // % < ** < unary < postfix/filter/test.
#include "chat/jinja_parser_impl.h"

namespace tachyon::jinja::detail {

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard g(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
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

ExprPtr Parser::binary(std::string op, ExprPtr l, ExprPtr r, int line) {
  auto b = node(op == "~" ? ExprKind::kConcat : ExprKind::kBinary, line);
  b->op = std::move(op);
  b->args.push_back(std::move(l));
  b->args.push_back(std::move(r));
  return finish(std::move(b));
}

ExprPtr Parser::parse_or() {
  ExprPtr l = parse_and();
  while (is_name("or")) {
    int line = cur().line;
    next();
    l = binary("or", std::move(l), parse_and(), line);
  }
  return l;
}

ExprPtr Parser::parse_and() {
  ExprPtr l = parse_not();
  while (is_name("and")) {
    int line = cur().line;
    next();
    l = binary("and", std::move(l), parse_not(), line);
  }
  return l;
}

ExprPtr Parser::parse_not() {
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

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_concat() {
  int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto c = node(ExprKind::kConcat, line);
  c->args.push_back(std::move(first));
  while (skip_op("~")) c->args.push_back(parse_math2());
  return finish(std::move(c));
}

ExprPtr Parser::parse_pow() {
  ExprPtr l = parse_unary(true);
  while (is_op("**")) {
    int line = cur().line;
    next();
    l = binary("**", std::move(l), parse_unary(true), line);
  }
  return l;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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
    c->value =
        tok.type == Tok::kInt ? Value::integer(tok.int_value) : Value::floating(tok.float_value);
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

bool Parser::is_tuple_end(std::initializer_list<std::string_view> extra) const {
  if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
  return cur().type == Tok::kName &&
         std::find(extra.begin(), extra.end(), cur().text) != extra.end();
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
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

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
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

ExprPtr Parser::parse_subscript(ExprPtr e) {
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

ExprPtr Parser::parse_subscribed() {
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

void Parser::parse_call_args(CallSpec& c) {
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

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto c = node(ExprKind::kCall, cur().line);
  parse_call_args(c->call);
  c->args.push_back(std::move(callee));
  return finish(std::move(c));
}

std::string Parser::dotted_name() {
  std::string n = expect_name();
  while (is_op(".")) {
    next();
    n += "." + expect_name();
  }
  return n;
}

ExprPtr Parser::parse_filter(ExprPtr e, bool start_inline) {
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

ExprPtr Parser::parse_test(ExprPtr e) {
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
ExprPtr Parser::parse_math1() {
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    int line = cur().line;
    next();
    l = binary(op, std::move(l), parse_concat(), line);
  }
  return l;
}

ExprPtr Parser::parse_math2() {
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    int line = cur().line;
    next();
    l = binary(op, std::move(l), parse_pow(), line);
  }
  return l;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
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

}  // namespace tachyon::jinja::detail
