// Internal: the parser's class, shared by jinja_parser.cc (statements) and
// jinja_parser_expr.cc (expressions).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "chat/jinja_parser.h"

namespace tachyon::jinja::detail {

inline bool is_reserved_const(std::string_view n) {
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
    if (cur().type == Tok::kEof)
      error(fmt::format("unexpected end of template, expected '{}'.", wanted));
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
  Body subparse(std::initializer_list<std::string_view> end_names);

  // `{% tag ... %}` body up to one of `ends`; the end tag's name is left current.
  Body statements(std::initializer_list<std::string_view> ends, bool drop_needle);

  void parse_statement(Body& out);

  void parse_if(Stmt& s);

  void parse_for(Stmt& s);

  void parse_set(Stmt& s);

  void parse_signature(MacroDef& m);

  void parse_macro(Stmt& s);

  void macro_body(MacroDef& m, std::initializer_list<std::string_view> ends);

  void parse_call_block(Stmt& s);

  void parse_with(Stmt& s);

  Target parse_assign_target(bool with_tuple, bool with_namespace,
                             std::initializer_list<std::string_view> extra_end);

  // ---- expressions
  ExprPtr parse_expression(bool with_condexpr);

  ExprPtr parse_condexpr();

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line);

  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);

  ExprPtr parse_primary();

  bool is_tuple_end(std::initializer_list<std::string_view> extra) const;

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parens);

  ExprPtr parse_postfix(ExprPtr e);

  ExprPtr parse_filter_expr(ExprPtr e);

  ExprPtr parse_subscript(ExprPtr e);

  ExprPtr parse_subscribed();

  void parse_call_args(CallSpec& c);

  ExprPtr parse_call(ExprPtr callee);

  std::string dotted_name();

  ExprPtr parse_filter(ExprPtr e, bool start_inline);

  ExprPtr parse_test(ExprPtr e);

  std::vector<Token> t_;
  size_t i_ = 0;
  ParseOptions opt_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> block_stack_;
  std::vector<std::set<std::string>*> name_sinks_;
};

}  // namespace tachyon::jinja::detail
