// Global functions (range, dict, namespace, cycler, joiner, raise_exception,
// strftime_now) and the argument binding shared by all built-ins.
#include <fmt/format.h>

#include <ctime>
#include <functional>

#include "chat/jinja_interp.h"

namespace tachyon::jinja {

std::vector<Value> bind(std::string_view fn, const CallArgs& args,
                        std::initializer_list<Param> params) {
  std::vector<Value> out;
  std::vector<bool> set(params.size(), false);
  out.resize(params.size());
  if (args.args.size() > params.size())
    fail(fmt::format("{}() takes at most {} arguments ({} given)", fn, params.size(),
                     args.args.size()));
  for (size_t i = 0; i < args.args.size(); ++i) {
    out[i] = args.args[i];
    set[i] = true;
  }
  for (const auto& [k, v] : args.kwargs) {
    size_t i = 0;
    for (const auto& p : params) {
      if (k == p.name) break;
      ++i;
    }
    if (i == params.size())
      fail(fmt::format("{}() got an unexpected keyword argument '{}'", fn, k));
    if (set[i]) fail(fmt::format("{}() got multiple values for argument '{}'", fn, k));
    out[i] = v;
    set[i] = true;
  }
  size_t i = 0;
  for (const auto& p : params) {
    if (!set[i]) {
      if (!p.default_value) fail(fmt::format("{}() missing required argument '{}'", fn, p.name));
      out[i] = *p.default_value;
    }
    ++i;
  }
  return out;
}

int64_t to_int_arg(const Value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_undefined()) fail_undefined(v);
  fail(fmt::format("{}: '{}' object cannot be interpreted as an integer", what, type_name(v)));
}

std::string str_arg(const Value& v, std::string_view what) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) fail_undefined(v);
  fail(fmt::format("{}: expected a string, got '{}'", what, type_name(v)));
}

namespace {

class Builtin : public Object {
 public:
  using Fn = std::function<Value(Interpreter&, CallArgs&)>;
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  std::string repr() const override { return fmt::format("<built-in function {}>", name_); }
  Value call(Interpreter& in, CallArgs& args) override {
    return mark_derived(fn_(in, args), Value(), args);
  }

 private:
  std::string name_;
  Fn fn_;
};

Value builtin(std::string name, Builtin::Fn fn) {
  return Value::object(std::make_shared<Builtin>(std::move(name), std::move(fn)));
}

// The sandbox refuses ranges longer than this, as jinja2's does.
constexpr int64_t kMaxRange = 100000;

Value range_fn(Interpreter& in, CallArgs& a) {
  if (!a.kwargs.empty()) fail("range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3)
    fail(fmt::format("range expected at most 3 arguments, got {}", a.args.size()));
  int64_t start = 0, stop, step = 1;
  if (a.args.size() == 1) {
    stop = to_int_arg(a.args[0], "range");
  } else {
    start = to_int_arg(a.args[0], "range");
    stop = to_int_arg(a.args[1], "range");
    if (a.args.size() == 3) step = to_int_arg(a.args[2], "range");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  // Length computed without overflow: (stop - start) may exceed int64.
  __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  __int128 astep = step > 0 ? step : -static_cast<__int128>(step);
  __int128 len = span <= 0 ? 0 : (span + astep - 1) / astep;
  if (len > kMaxRange)
    fail(fmt::format("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).",
                     kMaxRange));
  in.step(static_cast<int64_t>(len));
  ValueList out;
  out.reserve(static_cast<size_t>(len));
  for (int64_t i = 0; i < static_cast<int64_t>(len); ++i)
    out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

void fill_dict(Interpreter& in, Dict& d, const CallArgs& a, const char* fn) {
  const size_t from = a.args.empty()        ? 0
                      : a.args[0].is_dict() ? a.args[0].dict().size()
                      : a.args[0].is_list() ? a.args[0].items().size()
                                            : 0;
  in.charge_items(2 * (from + a.kwargs.size()));
  if (a.args.size() > 1)
    fail(fmt::format("{} expected at most 1 argument, got {}", fn, a.args.size()));
  if (!a.args.empty()) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().entries()) d.set(k, v);
    } else if (src.is_list()) {
      for (const auto& pair : src.items()) {
        if (!pair.is_list() || pair.items().size() != 2)
          fail(fmt::format("{}: sequence elements must be pairs", fn));
        d.set(pair.items()[0], pair.items()[1]);
      }
    } else if (!src.is_undefined()) {
      fail(fmt::format("'{}' object is not iterable", type_name(src)));
    }
  }
  for (const auto& [k, v] : a.kwargs) d.set(a.name_value(k), v);
}

class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(ValueList items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  Value getattr(std::string_view name) const override {
    auto self = std::const_pointer_cast<Cycler>(shared_from_this());
    if (name == "current") return items_[pos_];
    if (name == "next")
      return builtin("next", [self](Interpreter&, CallArgs&) {
        Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      });
    if (name == "reset")
      return builtin("reset", [self](Interpreter&, CallArgs&) {
        self->pos_ = 0;
        return Value::none();
      });
    return Object::getattr(name);
  }

 private:
  ValueList items_;
  size_t pos_ = 0;
};

class Joiner : public Object {
 public:
  // `sep` as str() gives it, its untrusted bytes kept.
  explicit Joiner(Value sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Interpreter&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return sep_;
  }

 private:
  Value sep_;
  bool used_ = false;
};

}  // namespace

void add_globals(Scope& scope) {
  scope.set("range", builtin("range", range_fn));
  scope.set("dict", builtin("dict", [](Interpreter& in, CallArgs& a) {
              auto d = std::make_shared<Dict>();
              fill_dict(in, *d, a, "dict");
              return Value::dict(std::move(d));
            }));
  scope.set("namespace", builtin("namespace", [](Interpreter& in, CallArgs& a) {
              auto ns = std::make_shared<Namespace>();
              fill_dict(in, ns->attrs, a, "namespace");
              return Value::object(ns);
            }));
  scope.set("cycler", builtin("cycler", [](Interpreter&, CallArgs& a) {
              if (a.args.empty()) fail("at least one item has to be provided");
              return Value::object(std::make_shared<Cycler>(a.args));
            }));
  scope.set("joiner", builtin("joiner", [](Interpreter&, CallArgs& a) {
              auto v = bind("joiner", a, {{"sep", Value::string(", ")}});
              MarkedString sep;
              sep.append(v[0]);
              return Value::object(std::make_shared<Joiner>(sep.take()));
            }));
  scope.set("raise_exception", builtin("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
              auto v = bind("raise_exception", a, {{"message", std::nullopt}});
              fail(to_str(v[0]));
            }));
  scope.set("strftime_now", builtin("strftime_now", [](Interpreter& in, CallArgs& a) {
              auto v = bind("strftime_now", a, {{"format", std::nullopt}});
              std::string f = str_arg(v[0], "strftime_now");
              std::time_t t = in.options().now ? *in.options().now : std::time(nullptr);
              std::tm tm{};
              localtime_r(&t, &tm);
              if (f.empty()) return Value::string("");
              std::string buf(256 + f.size() * 8, '\0');
              size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
              buf.resize(n);
              return Value::string(std::move(buf));
            }));
}

}  // namespace tachyon::jinja
