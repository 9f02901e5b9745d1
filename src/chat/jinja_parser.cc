// Statements of the template grammar, and the entry point.
#include "chat/jinja_parser_impl.h"

namespace tachyon::jinja::detail {

Body Parser::subparse(std::initializer_list<std::string_view> end_names) {
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
      if (cur().type == Tok::kName && std::find(ends.begin(), ends.end(), cur().text) != ends.end())
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
    error(
        fmt::format("Unexpected end of template. Jinja was looking for the following tags: {}. "
                    "The innermost block that needs to be closed is '{}'.",
                    want, block_stack_.empty() ? "" : block_stack_.back()));
  }
  return body;
}

Body Parser::statements(std::initializer_list<std::string_view> ends, bool drop_needle) {
  skip_op(":");
  expect(Tok::kBlockEnd, "end of statement block");
  Body b = subparse(ends);
  if (drop_needle) next();
  return b;
}

void Parser::parse_statement(Body& out) {
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

void Parser::parse_if(Stmt& s) {
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

void Parser::parse_for(Stmt& s) {
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

void Parser::parse_set(Stmt& s) {
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

void Parser::parse_signature(MacroDef& m) {
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

void Parser::parse_macro(Stmt& s) {
  next();
  s.kind = StmtKind::kMacro;
  s.macro = std::make_shared<MacroDef>();
  s.macro->name = expect_name();
  parse_signature(*s.macro);
  macro_body(*s.macro, {"endmacro"});
}

void Parser::macro_body(MacroDef& m, std::initializer_list<std::string_view> ends) {
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

void Parser::parse_call_block(Stmt& s) {
  next();
  s.kind = StmtKind::kCallBlock;
  s.macro = std::make_shared<MacroDef>();
  s.macro->name = "caller";
  if (is_op("(")) parse_signature(*s.macro);
  s.expr = parse_expression(true);
  if (s.expr->kind != ExprKind::kCall) error("expected call");
  macro_body(*s.macro, {"endcall"});
}

void Parser::parse_with(Stmt& s) {
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
Target Parser::parse_assign_target(bool with_tuple, bool with_namespace,
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
    if (cur().type == Tok::kBlockEnd ||
        (cur().type == Tok::kName &&
         std::find(extra_end.begin(), extra_end.end(), cur().text) != extra_end.end()) ||
        is_op("="))
      break;
    tup.items.push_back(single());
  }
  return tup;
}

}  // namespace tachyon::jinja::detail

namespace tachyon::jinja {

std::shared_ptr<const Program> parse_template(std::string_view source,
                                              const ParseOptions& options) {
  return detail::Parser(tokenize(source, options.lexer), options).run();
}

}  // namespace tachyon::jinja
