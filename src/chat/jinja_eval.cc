// Expression evaluation and the sandboxed attribute/item/call protocol.
#include <fmt/format.h>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

class BoundMethodObj : public Object {
 public:
  BoundMethodObj(Value receiver, std::string name)
      : receiver_(std::move(receiver)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  std::string repr() const override {
    return fmt::format("<built-in method {} of {} object>", name_, jinja::type_name(receiver_));
  }
  Value call(Interpreter& in, CallArgs& args) override {
    return call_method(in, receiver_, name_, args);
  }

 private:
  Value receiver_;
  std::string name_;
};

Value unsafe(const Value& obj, std::string_view name) {
  return Value::undefined(
      fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
}

Value no_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

// A method of a str/list/dict as Python's getattr finds it, or nullopt.
std::optional<Value> method_attr(const Value& obj, std::string_view name) {
  if (!has_method(obj, name)) return std::nullopt;
  if (is_unsafe_method(obj, name)) return unsafe(obj, name);
  return Value::object(std::make_shared<BoundMethodObj>(obj, std::string(name)));
}

Value slice(Interpreter& in, const Value& obj, const Value& a, const Value& b, const Value& c) {
  auto part = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    (void)what;
    return v.as_int();
  };
  // Non-integer bounds raise TypeError in Python, which jinja2's getitem turns into
  // an undefined value.
  for (const Value* x : {&a, &b, &c})
    if (!x->is_none() && !x->is_undefined() && !x->is_int() && !x->is_bool())
      return Value::undefined(
          fmt::format("slice indices must be integers or None, not {}", type_name(*x)));
  std::optional<int64_t> start = part(a, "start"), stop = part(b, "stop"), stepv = part(c, "step");
  int64_t step = stepv.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  bool is_str = obj.is_string();
  if (!is_str && !obj.is_list()) {
    if (obj.is_undefined()) fail_undefined(obj);
    return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }
  std::u32string chars;
  bool ascii = false;
  int64_t n;
  if (is_str) {
    const std::string& s = obj.str();
    ascii = utf8_length(s) == s.size();
    if (!ascii) chars = utf8_decode(s);
    n = static_cast<int64_t>(ascii ? s.size() : chars.size());
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  // Python's slice.indices()
  auto adjust = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg) {
    if (!v) return step > 0 ? def_pos : def_neg;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t lo = adjust(start, 0, n - 1);
  int64_t hi = adjust(stop, n, -1);
  std::vector<int64_t> idx;
  if (step > 0) {
    for (int64_t i = lo; i < hi; i += step) idx.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += step) idx.push_back(i);
  }
  in.step(static_cast<int64_t>(idx.size()));
  if (is_str) {
    std::string out;
    for (int64_t i : idx) {
      if (ascii) {
        out.push_back(obj.str()[static_cast<size_t>(i)]);
      } else {
        utf8_append(out, chars[static_cast<size_t>(i)]);
      }
    }
    return Value::string(std::move(out));
  }
  ValueList out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(obj.items()[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.is_tuple());
}

}  // namespace

[[noreturn]] void fail_undefined(const Value& v) {
  fail(v.undefined_hint().empty() ? std::string("undefined value") : v.undefined_hint());
}

Value Interpreter::getattr(const Value& obj, std::string_view name) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      fail_undefined(obj);
    case Value::Type::kDict: {
      if (auto m = method_attr(obj, name)) return *m;
      if (const Value* v = obj.dict().find(name)) return *v;
      return no_attribute(obj, name);
    }
    case Value::Type::kString:
    case Value::Type::kList:
      if (auto m = method_attr(obj, name)) return *m;
      if (!name.empty() && name[0] == '_') return unsafe(obj, name);
      return no_attribute(obj, name);
    case Value::Type::kObject:
      if (!name.empty() && name[0] == '_') return unsafe(obj, name);
      return obj.obj().getattr(name);
    default:
      if (!name.empty() && name[0] == '_') return unsafe(obj, name);
      return no_attribute(obj, name);
  }
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      fail_undefined(obj);
    case Value::Type::kDict: {
      if (is_hashable(key))
        if (const Value* v = obj.dict().find(key)) return *v;
      break;
    }
    case Value::Type::kList:
    case Value::Type::kString: {
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          int64_t n = static_cast<int64_t>(obj.items().size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        } else {
          const std::string& s = obj.str();
          int64_t n = static_cast<int64_t>(utf8_length(s));
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            size_t off = utf8_offset(s, static_cast<size_t>(i));
            size_t end = off;
            utf8_next(s, end);
            return mark_derived(Value::string(s.substr(off, end - off)), {&obj});
          }
        }
        return Value::undefined(
            fmt::format("{} has no element {}", object_type_repr(obj), key.as_int()));
      }
      break;
    }
    default:
      break;
  }
  if (key.is_string()) {
    // obj[name] falls back to getattr(obj, name), as jinja2's sandbox does.
    if (obj.is_object()) return getattr(obj, key.str());
    if (auto m = method_attr(obj, key.str())) return *m;
    if (!key.str().empty() && key.str()[0] == '_' && !obj.is_dict()) return unsafe(obj, key.str());
    if (obj.is_dict()) return no_attribute(obj, key.str());
  }
  if (obj.is_dict() || obj.is_list() || obj.is_string())
    return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), repr(key)));
  return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_object() || !callee.obj().callable())
    fail(fmt::format("'{}' object is not callable", type_name(callee)));
  DepthGuard guard(*this);
  return callee.obj().call(*this, args);
}

Value Interpreter::eval_call_args(const Expr& e, const ScopePtr& scope, CallArgs& out) {
  const CallSpec& c = e.call;
  for (const auto& a : c.args) out.args.push_back(eval(*a, scope));
  for (const auto& [k, v] : c.kwargs) out.kwargs.emplace_back(k, eval(*v, scope));
  if (c.dyn_args) {
    Value extra = eval(*c.dyn_args, scope);
    for (auto& v : iterate(extra)) out.args.push_back(std::move(v));
  }
  if (c.dyn_kwargs) {
    Value extra = eval(*c.dyn_kwargs, scope);
    if (!extra.is_dict()) fail("argument after ** must be a mapping");
    for (const auto& [k, v] : extra.dict().entries()) {
      if (!k.is_string()) fail("keywords must be strings");
      out.kwargs.emplace_back(k.str(), v);
      out.untrusted_names = out.untrusted_names || !k.untrusted().empty();
    }
  }
  return Value();
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(*this);
  step();
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName: {
      if (const Value* v = scope->lookup(e.name)) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        d->set(std::move(k), eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetattr:
      return getattr(eval(*e.args[0], scope), e.name);
    case ExprKind::kGetitem: {
      Value obj = eval(*e.args[0], scope);
      return getitem(obj, eval(*e.args[1], scope));
    }
    case ExprKind::kSlice: {
      Value obj = eval(*e.args[0], scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        if (e.args[i + 1]) parts[i] = eval(*e.args[i + 1], scope);
      return mark_derived(slice(*this, obj, parts[0], parts[1], parts[2]), {&obj});
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.args[0], scope);
      if (e.op == "not") return Value::boolean(!truthy(v));
      if (v.is_undefined()) fail_undefined(v);
      if (v.is_float()) return Value::floating(e.op == "-" ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        if (e.op == "+") return Value::integer(v.as_int());
        if (v.as_int() == INT64_MIN) fail("integer overflow");
        return Value::integer(-v.as_int());
      }
      fail(fmt::format("bad operand type for unary {}: '{}'", e.op, type_name(v)));
    }
    case ExprKind::kBinary: {
      Value a = eval(*e.args[0], scope);
      if (e.op == "and") return truthy(a) ? eval(*e.args[1], scope) : a;
      if (e.op == "or") return truthy(a) ? a : eval(*e.args[1], scope);
      Value b = eval(*e.args[1], scope);
      line_ = e.line;
      return binary_op(*this, e.op, a, b);
    }
    case ExprKind::kConcat: {
      MarkedString out;
      for (const auto& a : e.args) {
        Value v = eval(*a, scope);
        out.append(v);
        check_string(out.size());
      }
      charge(out.bytes());
      return out.take();
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.args[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        const std::string& op = e.ops[i];
        bool r;
        if (op == "==") {
          r = equals(left, right);
        } else if (op == "!=") {
          r = !equals(left, right);
        } else if (op == "in") {
          r = contains(right, left);
        } else if (op == "notin") {
          r = !contains(right, left);
        } else {
          int c = compare(left, right);
          r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kCondExpr:
      if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.",
          e.line));
    case ExprKind::kCall: {
      Value callee = eval(*e.args[0], scope);
      CallArgs a;
      eval_call_args(e, scope, a);
      line_ = e.line;
      return call(callee, a);
    }
    case ExprKind::kFilter: {
      Value v = e.args[0] ? eval(*e.args[0], scope) : Value();
      CallArgs a;
      eval_call_args(e, scope, a);
      line_ = e.line;
      if (!e.filter_fn) return filter(e.name, v, a);
      return mark_filter_result(e.name, e.filter_fn(*this, v, a), v, a);
    }
    case ExprKind::kTest: {
      Value v = eval(*e.args[0], scope);
      CallArgs a;
      eval_call_args(e, scope, a);
      line_ = e.line;
      return Value::boolean(e.test_fn ? e.test_fn(*this, v, a) : test(e.name, v, a));
    }
  }
  fail("unknown expression");
}

Value Interpreter::filter(std::string_view name, const Value& v, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) fail(fmt::format("No filter named '{}'.", name));
  return mark_filter_result(name, f(*this, v, args), v, args);
}

bool Interpreter::test(std::string_view name, const Value& v, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) fail(fmt::format("No test named '{}'.", name));
  return t(*this, v, args);
}

bool Interpreter::has_filter(std::string_view name) const {
  return find_filter(name) != nullptr;
}
bool Interpreter::has_test(std::string_view name) const {
  return find_test(name) != nullptr;
}

}  // namespace tachyon::jinja
