// Tree-walking interpreter for parsed templates, with jinja2's runtime semantics
// (scoping, undefined values, loops, macros) and hard limits on work, output size,
// value size and recursion so that a hostile template fails fast instead of
// hanging the process or exhausting memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace tachyon::jinja {

struct Limits {
  int64_t max_steps = 10'000'000;       // expression evaluations + statements + loop items
  size_t max_output_bytes = 64u << 20;  // rendered text
  size_t max_string_bytes = 64u << 20;  // any one string value
  size_t max_items = 4'000'000;         // elements of any one list built at run time
  size_t max_total_bytes = 256u << 20;  // all strings and lists built during one render
  int max_depth = 600;                  // nested evaluation frames (macro recursion included)
};

struct RenderOptions {
  Limits limits;
  // Clock for strftime_now(); unset means the local time at render.
  std::optional<std::time_t> now;
  // A render in progress ends with an error once `cancel` (when given) is set, or past
  // `deadline`: both are looked at every few thousand evaluation steps.
  const std::atomic<bool>* cancel = nullptr;
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

// A lexical scope: loop iterations, macro calls and filter/with blocks open one. Most
// hold a few names and are searched in place; one that grows past kIndexFrom names (the
// render's context, which holds every chat_template_kwargs key) is indexed by name, so
// setting or looking up n names costs O(n), not O(n^2).
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* lookup(std::string_view name) const;
  const Value* lookup_local(std::string_view name) const;
  void set(std::string_view name, Value v);

 private:
  static constexpr size_t kIndexFrom = 16;
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
  std::unordered_map<std::string_view, size_t> index_;  // into vars_, once indexed
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(std::shared_ptr<const Program> program, const RenderOptions& options);
  ~Interpreter();

  // Renders with `vars` as the template's variables (after the built-in globals); the
  // output's untrusted spans say which bytes came from untrusted input.
  MarkedString render(const std::vector<std::pair<std::string, Value>>& vars);

  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec(const Body& body, const ScopePtr& scope, MarkedString& out);
  Value eval(const Expr& e, const ScopePtr& scope);

  // Python/jinja2 operations, used by filters and methods as well.
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  Value filter(std::string_view name, const Value& v, CallArgs& args);
  bool test(std::string_view name, const Value& v, CallArgs& args);
  bool has_filter(std::string_view name) const;
  bool has_test(std::string_view name) const;
  // Elements of an iterable (list items, dict keys, string characters).
  ValueList iterate(const Value& v);

  // Accounting: every unit of work and every produced string passes through these.
  void step(int64_t n = 1);
  void check_string(size_t bytes) const;
  void check_items(size_t n) const;
  // Counts a newly built string or list (bytes) against the per-render budget.
  void charge(size_t bytes);
  // A list or dict of n values (a dict entry counts as two) built or copied at run time:
  // against the item limit, the steps and the byte budget, so that a template which
  // copies a growing collection in a loop is bounded like one that grows a string.
  void charge_items(size_t n);
  const Limits& limits() const { return options_.limits; }
  const RenderOptions& options() const { return options_; }

  // Runs a macro body (macro calls, call-block callers, recursive loops).
  struct DepthGuard {
    Interpreter& in;
    explicit DepthGuard(Interpreter& i);
    ~DepthGuard() { --in.depth_; }
  };

  Value run_loop(const Stmt& s, const Value& iterable, const ScopePtr& scope, int depth,
                 MarkedString& out);

 private:
  void exec_stmt(const Stmt& s, const ScopePtr& scope, MarkedString& out, Flow& flow);
  void assign(const Target& t, const Value& v, const ScopePtr& scope);
  Value eval_call_args(const Expr& e, const ScopePtr& scope, CallArgs& out);
  void append_output(MarkedString& out, std::string_view text);
  void append_output(MarkedString& out, const Value& v);

  std::shared_ptr<const Program> program_;
  RenderOptions options_;
  int64_t steps_ = 0;
  // Cancellation and the deadline are looked at once every kControlEvery steps.
  static constexpr int64_t kControlEvery = 128;
  int64_t next_control_check_ = 0;
  size_t total_bytes_ = 0;
  int depth_ = 0;
  int line_ = 0;
  friend class MacroObject;
};

// Binary operators with Python semantics (+ - * / // % ** on ints, floats, strings,
// lists), checked against the interpreter's limits.
Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b);
// Membership test `a in b`.
bool contains(const Value& container, const Value& item);
// The untrusted spans of what filter or method `name` returned for `operand` and `args`:
// trim/strip/lstrip/rstrip keep the spans of the part of the operand they return; any
// other string built from untrusted values is untrusted as a whole (mark_derived).
Value mark_filter_result(std::string_view name, Value result, const Value& operand,
                         const CallArgs& args);
// Python's `fmt % args` string formatting.
std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args);

// A one-shot iterator (what jinja2's select/map/reverse/items... return): always
// true, has no length, and yields its remaining items once.
class IteratorObject : public Object {
 public:
  IteratorObject(ValueList items, std::string kind)
      : items_(std::move(items)), kind_(std::move(kind)) {}
  std::string type_name() const override { return kind_; }
  std::string repr() const override { return fmt::format("<{} object>", kind_); }
  ValueList take_rest();
  std::optional<Value> take_one();

 private:
  ValueList items_;
  size_t pos_ = 0;
  std::string kind_;
};
Value make_iterator(ValueList items, std::string kind = "generator");

// Filters, tests, methods and globals live in their own files.
FilterFn find_filter(std::string_view name);
FilterFn find_text_filter(std::string_view name);  // the part in jinja_filters_text.cc
TestFn find_test(std::string_view name);
// Calls `name` on a str/list/dict receiver as Python would; unknown names give
// Undefined from lookup_method().
bool has_method(const Value& receiver, std::string_view name);
bool is_unsafe_method(const Value& receiver, std::string_view name);
Value call_method(Interpreter& in, const Value& receiver, std::string_view name, CallArgs& args);
void add_globals(Scope& scope);

// Positional/keyword binding for built-ins with Python-like signatures.
struct Param {
  const char* name;
  std::optional<Value> default_value;  // nullopt: required
};
std::vector<Value> bind(std::string_view fn, const CallArgs& args,
                        std::initializer_list<Param> params);

// Helpers shared by filters and methods.
int64_t to_int_arg(const Value& v, std::string_view what);
std::string str_arg(const Value& v, std::string_view what);
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace tachyon::jinja
