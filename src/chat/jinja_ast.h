// Syntax tree of a parsed template. Immutable after parsing, so one tree can be
// rendered by many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace tachyon::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value...
  kGetattr,   // args[0].name
  kGetitem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  kUnary,     // op: "-", "+", "not"; args[0]
  kBinary,    // op: + - * / // % ** and or; args[0], args[1]
  kConcat,    // args joined with ~
  kCompare,   // args[0] ops[i] args[i+1]...
  kCondExpr,  // args: then, test, else (else may be null)
  kCall,      // args[0](call)
  kFilter,    // name; args[0] | name(call); args[0] null for filter blocks
  kTest,      // name; args[0] is name(call)
};

struct CallSpec {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;  // *args, **kwargs
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;  // height of this subtree (bounded at parse time)
  Value value;
  std::string name;
  std::string op;
  std::vector<std::string> ops;  // comparisons
  std::vector<ExprPtr> args;
  CallSpec call;
};

// Assignment target: a name, a namespace attribute, or a tuple of targets.
struct Target {
  enum class Kind : uint8_t { kName, kNsAttr, kTuple } kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned to the last params
  Body body;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

enum class StmtKind : uint8_t {
  kData,         // text
  kOutput,       // expr
  kIf,           // expr, body, else_body
  kFor,          // target, expr (iterable), cond, body, else_body, recursive
  kSet,          // target, expr
  kSetBlock,     // target, filter (may be null), body
  kMacro,        // macro
  kCallBlock,    // macro (the caller), expr (the call)
  kFilterBlock,  // expr (filter chain with null innermost operand), body
  kWith,         // targets/values, body
  kBreak,
  kContinue,
  kDo,     // expr
  kScope,  // body (generation blocks: rendered as is)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  Target target;
  std::vector<Target> with_targets;
  std::vector<ExprPtr> with_values;
  Body body, else_body;
  bool recursive = false;
  std::shared_ptr<MacroDef> macro;
};

struct Program {
  Body body;
};

}  // namespace tachyon::jinja
