#include "chat/jinja_interp.h"

#include <fmt/format.h>

#include <algorithm>

#include "chat/jinja_strings.h"

namespace tachyon::jinja {

// ---- scopes

const Value* Scope::lookup_local(std::string_view name) const {
  if (!index_.empty()) {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &vars_[it->second].second;
  }
  for (const auto& kv : vars_)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

const Value* Scope::lookup(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get())
    if (const Value* v = s->lookup_local(name)) return v;
  return nullptr;
}

void Scope::set(std::string_view name, Value v) {
  if (Value* have = const_cast<Value*>(lookup_local(name))) {
    *have = std::move(v);
    return;
  }
  if (vars_.size() == vars_.capacity()) {
    // The index views the names' bytes, which a reallocation of vars_ moves (a short
    // string lives inside its std::string): rebuild it after growing.
    vars_.reserve(std::max<size_t>(2 * vars_.size(), 4));
    if (!index_.empty()) {
      index_.clear();
      for (size_t i = 0; i < vars_.size(); ++i) index_.emplace(vars_[i].first, i);
    }
  }
  vars_.emplace_back(std::string(name), std::move(v));
  if (!index_.empty()) {
    index_.emplace(vars_.back().first, vars_.size() - 1);
  } else if (vars_.size() > kIndexFrom) {
    for (size_t i = 0; i < vars_.size(); ++i) index_.emplace(vars_[i].first, i);
  }
}

// ---- objects that need the interpreter

namespace {

// A macro, or the body of a call block (`caller`). The defining scope is held weakly:
// a scope owns the macro, and a strong reference back would never be freed.
class MacroObject : public Object {
 public:
  MacroObject(const MacroDef* def, std::weak_ptr<Scope> closure)
      : def_(def), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  bool callable() const override { return true; }
  std::string repr() const override { return fmt::format("<Macro '{}'>", def_->name); }
  Value getattr(std::string_view name) const override {
    if (name == "name") return Value::string(def_->name);
    return Object::getattr(name);
  }

  Value call(Interpreter& in, CallArgs& args) override {
    Interpreter::DepthGuard guard(in);
    ScopePtr parent = closure_.lock();
    if (!parent)
      fail(fmt::format("macro '{}' called after the scope that defined it ended", def_->name));
    auto scope = std::make_shared<Scope>(parent);
    const auto& params = def_->params;
    size_t n = params.size();
    std::vector<bool> bound(n, false);
    ValueList extra;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i < n) {
        scope->set(params[i], args.args[i]);
        bound[i] = true;
      } else {
        extra.push_back(args.args[i]);
      }
    }
    if (!extra.empty() && !def_->uses_varargs)
      fail(fmt::format("macro '{}' takes not more than {} argument(s)", def_->name, n));
    auto kw = std::make_shared<Dict>();
    bool caller_given = false;
    for (auto& [k, v] : args.kwargs) {
      size_t idx = n;
      for (size_t i = 0; i < n; ++i)
        if (params[i] == k) idx = i;
      if (idx < n) {
        if (bound[idx])
          fail(fmt::format("macro '{}' got multiple values for argument '{}'", def_->name, k));
        scope->set(k, v);
        bound[idx] = true;
      } else if (k == "caller" && def_->uses_caller) {
        scope->set("caller", v);
        caller_given = true;
      } else if (def_->uses_kwargs) {
        kw->set(args.name_value(k), v);
      } else {
        fail(fmt::format("macro '{}' takes no keyword argument '{}'", def_->name, k));
      }
    }
    size_t first_default = n - def_->defaults.size();
    for (size_t i = 0; i < n; ++i) {
      if (bound[i]) continue;
      if (i >= first_default) {
        scope->set(params[i], in.eval(*def_->defaults[i - first_default], scope));
      } else {
        scope->set(params[i],
                   Value::undefined(fmt::format("parameter '{}' was not provided", params[i])));
      }
    }
    if (def_->uses_varargs) scope->set("varargs", Value::list(std::move(extra), true));
    if (def_->uses_kwargs) scope->set("kwargs", Value::dict(kw));
    if (def_->uses_caller && !caller_given)
      scope->set("caller", Value::undefined("No caller defined"));
    MarkedString out;
    in.exec(def_->body, scope, out);
    in.charge(out.bytes());
    return out.take();
  }

 private:
  const MacroDef* def_;
  std::weak_ptr<Scope> closure_;
};

class LoopObject;

class LoopMethod : public Object {
 public:
  LoopMethod(std::shared_ptr<LoopObject> loop, std::string name)
      : loop_(std::move(loop)), name_(std::move(name)) {}
  std::string type_name() const override { return "method"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;

 private:
  std::shared_ptr<LoopObject> loop_;
  std::string name_;
};

class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  std::string type_name() const override { return "LoopContext"; }
  bool callable() const override { return stmt != nullptr && stmt->recursive; }
  std::string repr() const override {
    return fmt::format("<LoopContext {}/{}>", index0 + 1, length);
  }

  Value getattr(std::string_view name) const override {
    if (name == "index") return Value::integer(index0 + 1);
    if (name == "index0") return Value::integer(index0);
    if (name == "revindex") return Value::integer(length - index0);
    if (name == "revindex0") return Value::integer(length - index0 - 1);
    if (name == "first") return Value::boolean(index0 == 0);
    if (name == "last") return Value::boolean(index0 == length - 1);
    if (name == "length") return Value::integer(length);
    if (name == "depth") return Value::integer(depth);
    if (name == "depth0") return Value::integer(depth - 1);
    if (name == "previtem")
      return index0 > 0 && static_cast<size_t>(index0 - 1) < items->size()
                 ? (*items)[static_cast<size_t>(index0 - 1)]
                 : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return index0 + 1 < length ? (*items)[static_cast<size_t>(index0 + 1)]
                                 : Value::undefined("there is no next item");
    if (name == "cycle" || name == "changed") {
      auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
      return Value::object(std::make_shared<LoopMethod>(self, std::string(name)));
    }
    return Object::getattr(name);
  }

  Value call(Interpreter& in, CallArgs& args) override {
    if (!callable()) return Object::call(in, args);
    if (args.args.size() != 1 || !args.kwargs.empty()) fail("loop() takes exactly one argument");
    auto parent = scope.lock();
    if (!parent) fail("recursive loop called outside its loop");
    MarkedString out;
    in.run_loop(*stmt, args.args[0], parent, depth + 1, out);
    return out.take();
  }

  const ValueList* items = nullptr;
  int64_t index0 = 0, length = 0;
  int depth = 1;
  const Stmt* stmt = nullptr;
  std::weak_ptr<Scope> scope;
  std::optional<ValueList> last_changed;
};

Value LoopMethod::call(Interpreter&, CallArgs& args) {
  if (name_ == "cycle") {
    if (args.args.empty()) fail("no items for cycling given");
    return args.args[static_cast<size_t>(loop_->index0) % args.args.size()];
  }
  // changed(*values): true when the values differ from the previous call's.
  ValueList now = args.args;
  bool changed = true;
  if (loop_->last_changed && loop_->last_changed->size() == now.size()) {
    changed = false;
    for (size_t i = 0; i < now.size(); ++i)
      if (!equals(now[i], (*loop_->last_changed)[i])) changed = true;
  }
  if (changed) loop_->last_changed = std::move(now);
  return Value::boolean(changed);
}

}  // namespace

// ---- interpreter

Interpreter::DepthGuard::DepthGuard(Interpreter& i) : in(i) {
  if (++in.depth_ > in.options_.limits.max_depth) {
    --in.depth_;
    fail(fmt::format("recursion deeper than the limit of {}", in.options_.limits.max_depth));
  }
}

Interpreter::Interpreter(std::shared_ptr<const Program> program, const RenderOptions& options)
    : program_(std::move(program)), options_(options) {}
Interpreter::~Interpreter() = default;

void Interpreter::step(int64_t n) {
  steps_ += n;
  if (steps_ > options_.limits.max_steps)
    fail(fmt::format("template exceeded the limit of {} evaluation steps",
                     options_.limits.max_steps));
  if (steps_ >= next_control_check_) {
    next_control_check_ = steps_ + kControlEvery;
    if (options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed))
      fail("the render was cancelled");
    if (options_.deadline && std::chrono::steady_clock::now() > *options_.deadline)
      fail("the template ran past its time limit");
  }
}

void Interpreter::check_string(size_t bytes) const {
  if (bytes > options_.limits.max_string_bytes)
    fail(fmt::format("string of {} bytes exceeds the limit of {}", bytes,
                     options_.limits.max_string_bytes));
}

void Interpreter::charge(size_t bytes) {
  check_string(bytes);
  total_bytes_ += bytes;
  if (total_bytes_ > options_.limits.max_total_bytes)
    fail(fmt::format("template built more than the limit of {} bytes of values",
                     options_.limits.max_total_bytes));
}

void Interpreter::charge_items(size_t n) {
  check_items(n);
  step(static_cast<int64_t>(n));
  charge(n * sizeof(Value));
}

void Interpreter::check_items(size_t n) const {
  if (n > options_.limits.max_items)
    fail(fmt::format("sequence of {} items exceeds the limit of {}", n, options_.limits.max_items));
}

void Interpreter::append_output(MarkedString& out, std::string_view text) {
  if (out.size() + text.size() > options_.limits.max_output_bytes)
    fail(fmt::format("output exceeds the limit of {} bytes", options_.limits.max_output_bytes));
  out.append_trusted(text);
}

void Interpreter::append_output(MarkedString& out, const Value& v) {
  const size_t spans = out.untrusted().size();
  if (v.is_string()) {
    if (out.size() + v.str().size() > options_.limits.max_output_bytes)
      fail(fmt::format("output exceeds the limit of {} bytes", options_.limits.max_output_bytes));
    out.append(v);
  } else {
    MarkedString s;
    s.append(v);
    if (out.size() + s.size() > options_.limits.max_output_bytes)
      fail(fmt::format("output exceeds the limit of {} bytes", options_.limits.max_output_bytes));
    out.append(s);
  }
  // The output's untrusted spans count against the render's byte budget.
  charge((out.untrusted().size() - spans) * sizeof(Span));
}

MarkedString Interpreter::render(const std::vector<std::pair<std::string, Value>>& vars) {
  auto globals = std::make_shared<Scope>(nullptr);
  add_globals(*globals);
  auto context = std::make_shared<Scope>(globals);
  for (const auto& [k, v] : vars) context->set(k, v);
  auto top = std::make_shared<Scope>(context);
  MarkedString out;
  try {
    exec(program_->body, top, out);
  } catch (TemplateError& e) {
    if (e.line == 0) e.line = line_;
    throw;
  }
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, MarkedString& out) {
  DepthGuard guard(*this);
  Flow flow = Flow::kNormal;
  for (const auto& s : body) {
    exec_stmt(*s, scope, out, flow);
    if (flow != Flow::kNormal) break;
  }
  return flow;
}

void Interpreter::exec_stmt(const Stmt& s, const ScopePtr& scope, MarkedString& out, Flow& flow) {
  step();
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kData:
      append_output(out, s.text);
      return;
    case StmtKind::kOutput: {
      Value v = eval(*s.expr, scope);
      line_ = s.line;
      append_output(out, v);
      return;
    }
    case StmtKind::kIf:
      flow = exec(truthy(eval(*s.expr, scope)) ? s.body : s.else_body, scope, out);
      return;
    case StmtKind::kFor:
      run_loop(s, eval(*s.expr, scope), scope, 1, out);
      return;
    case StmtKind::kSet:
      assign(s.target, eval(*s.expr, scope), scope);
      return;
    case StmtKind::kSetBlock: {
      MarkedString body;
      exec(s.body, scope, body);
      charge(body.bytes());
      Value v = body.take();
      if (s.expr) {
        // The filter chain's innermost operand is the rendered body.
        std::function<Value(const Expr&)> apply = [&](const Expr& f) -> Value {
          Value operand = f.args[0] ? apply(*f.args[0]) : v;
          CallArgs a;
          eval_call_args(f, scope, a);
          return filter(f.name, operand, a);
        };
        v = apply(*s.expr);
      }
      assign(s.target, v, scope);
      return;
    }
    case StmtKind::kMacro:
      scope->set(s.macro->name, Value::object(std::make_shared<MacroObject>(s.macro.get(), scope)));
      return;
    case StmtKind::kCallBlock: {
      Value caller = Value::object(std::make_shared<MacroObject>(s.macro.get(), scope));
      const Expr& call_expr = *s.expr;
      Value callee = eval(*call_expr.args[0], scope);
      CallArgs a;
      eval_call_args(call_expr, scope, a);
      a.kwargs.emplace_back("caller", caller);
      Value r = call(callee, a);
      append_output(out, r);
      return;
    }
    case StmtKind::kFilterBlock: {
      auto inner = std::make_shared<Scope>(scope);
      MarkedString body;
      exec(s.body, inner, body);
      charge(body.bytes());
      Value v = body.take();
      std::function<Value(const Expr&)> apply = [&](const Expr& f) -> Value {
        Value operand = f.args[0] ? apply(*f.args[0]) : v;
        CallArgs a;
        eval_call_args(f, scope, a);
        return filter(f.name, operand, a);
      };
      append_output(out, apply(*s.expr));
      return;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      std::vector<Value> values;
      for (const auto& e : s.with_values) values.push_back(eval(*e, scope));
      for (size_t i = 0; i < values.size(); ++i) assign(s.with_targets[i], values[i], inner);
      flow = exec(s.body, inner, out);
      return;
    }
    case StmtKind::kBreak:
      flow = Flow::kBreak;
      return;
    case StmtKind::kContinue:
      flow = Flow::kContinue;
      return;
    case StmtKind::kDo:
      eval(*s.expr, scope);
      return;
    case StmtKind::kScope:
      flow = exec(s.body, scope, out);
      return;
  }
}

void Interpreter::assign(const Target& t, const Value& v, const ScopePtr& scope) {
  switch (t.kind) {
    case Target::Kind::kName:
      scope->set(t.name, v);
      return;
    case Target::Kind::kNsAttr: {
      const Value* ns = scope->lookup(t.name);
      if (!ns || !ns->is_object() || !dynamic_cast<Namespace*>(&ns->obj()))
        fail("cannot assign attribute on non-namespace object");
      static_cast<Namespace&>(ns->obj()).set(t.attr, v);
      return;
    }
    case Target::Kind::kTuple: {
      ValueList items = iterate(v);
      if (items.size() < t.items.size())
        fail(fmt::format("not enough values to unpack (expected {}, got {})", t.items.size(),
                         items.size()));
      if (items.size() > t.items.size())
        fail(fmt::format("too many values to unpack (expected {})", t.items.size()));
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], scope);
      return;
    }
  }
}

Value Interpreter::run_loop(const Stmt& s, const Value& iterable, const ScopePtr& scope, int depth,
                            MarkedString& out) {
  ValueList items = iterate(iterable);
  if (s.cond) {
    ValueList kept;
    for (auto& item : items) {
      step();
      auto probe = std::make_shared<Scope>(scope);
      assign(s.target, item, probe);
      if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto loop = std::make_shared<LoopObject>();
  loop->items = &items;
  loop->length = static_cast<int64_t>(items.size());
  loop->depth = depth;
  loop->stmt = &s;
  loop->scope = scope;
  Value loop_value = Value::object(loop);
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    loop->index0 = static_cast<int64_t>(i);
    auto iter_scope = std::make_shared<Scope>(scope);
    assign(s.target, items[i], iter_scope);
    iter_scope->set("loop", loop_value);
    Flow f = exec(s.body, iter_scope, out);
    if (f == Flow::kBreak) break;
  }
  // The loop object may outlive this frame (stored somewhere); detach the items.
  static const ValueList kEmpty;
  loop->items = &kEmpty;
  loop->length = 0;
  if (items.empty()) exec(s.else_body, scope, out);
  return Value();
}

ValueList Interpreter::iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
      step(static_cast<int64_t>(v.items().size()));
      return v.items();
    case Value::Type::kDict: {
      ValueList keys;
      keys.reserve(v.dict().size());
      for (const auto& kv : v.dict().entries()) keys.push_back(kv.first);
      step(static_cast<int64_t>(keys.size()));
      return keys;
    }
    case Value::Type::kString: {
      ValueList chars;
      const std::string& s = v.str();
      size_t pos = 0;
      const Spans& marks = v.untrusted();
      while (pos < s.size()) {
        size_t start = pos;
        utf8_next(s, pos);
        chars.push_back(marks.empty() ? Value::string(s.substr(start, pos - start))
                                      : Value::string(s.substr(start, pos - start),
                                                      slice_spans(marks, start, pos)));
      }
      step(static_cast<int64_t>(chars.size()));
      return chars;
    }
    case Value::Type::kObject:
      if (auto* it = dynamic_cast<IteratorObject*>(&v.obj())) {
        ValueList rest = it->take_rest();
        step(static_cast<int64_t>(rest.size()));
        return rest;
      }
      [[fallthrough]];
    default:
      fail(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

ValueList IteratorObject::take_rest() {
  ValueList rest(items_.begin() + static_cast<std::ptrdiff_t>(pos_), items_.end());
  pos_ = items_.size();
  return rest;
}

std::optional<Value> IteratorObject::take_one() {
  if (pos_ >= items_.size()) return std::nullopt;
  return items_[pos_++];
}

Value make_iterator(ValueList items, std::string kind) {
  return Value::object(std::make_shared<IteratorObject>(std::move(items), std::move(kind)));
}

}  // namespace tachyon::jinja
