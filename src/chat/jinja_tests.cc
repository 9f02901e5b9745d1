// The tests of jinja2 (`x is defined`, `x is divisibleby 3`, ...).
#include <fmt/format.h>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

Value arg(const CallArgs& a, const char* test) {
  return bind(test, a, {{"other", std::nullopt}})[0];
}

bool t_defined(Interpreter&, const Value& v, CallArgs& a) {
  bind("defined", a, {});
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) {
  bind("undefined", a, {});
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs& a) {
  bind("none", a, {});
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) {
  bind("boolean", a, {});
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs& a) {
  bind("true", a, {});
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs& a) {
  bind("false", a, {});
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs& a) {
  bind("integer", a, {});
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs& a) {
  bind("float", a, {});
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, CallArgs& a) {
  bind("number", a, {});
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, CallArgs& a) {
  bind("string", a, {});
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) {
  bind("mapping", a, {});
  return v.is_dict();
}
bool t_lower(Interpreter&, const Value& v, CallArgs& a) {
  bind("lower", a, {});
  return py_islower(to_str(v));
}
bool t_upper(Interpreter&, const Value& v, CallArgs& a) {
  bind("upper", a, {});
  return py_isupper(to_str(v));
}
bool t_escaped(Interpreter&, const Value&, CallArgs& a) {
  bind("escaped", a, {});
  return false;
}

bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  bind("callable", a, {});
  return v.is_object() && v.obj().callable();
}

bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  bind("iterable", a, {});
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() ||
         (v.is_object() && dynamic_cast<IteratorObject*>(&v.obj()) != nullptr);
}

bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  bind("sequence", a, {});
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

int64_t int_of(const Value& v, const char* test) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int() && !v.is_bool())
    fail(fmt::format("test '{}' needs an integer, got '{}'", test, type_name(v)));
  return v.as_int();
}

bool t_odd(Interpreter& in, const Value& v, CallArgs& a) {
  bind("odd", a, {});
  if (v.is_float()) return equals(binary_op(in, "%", v, Value::integer(2)), Value::integer(1));
  return (int_of(v, "odd") & 1) != 0;
}
bool t_even(Interpreter& in, const Value& v, CallArgs& a) {
  bind("even", a, {});
  if (v.is_float()) return equals(binary_op(in, "%", v, Value::integer(2)), Value::integer(0));
  return (int_of(v, "even") & 1) == 0;
}
bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("divisibleby", a, {{"num", std::nullopt}});
  return equals(binary_op(in, "%", v, p[0]), Value::integer(0));
}

bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("in", a, {{"seq", std::nullopt}});
  return contains(p[0], v);
}

bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  Value o = arg(a, "sameas");
  if (v.type() != o.type()) return false;
  switch (v.type()) {
    case Value::Type::kNone:
    case Value::Type::kUndefined:
      return true;
    case Value::Type::kBool:
    case Value::Type::kInt:
      return v.as_int() == o.as_int();
    case Value::Type::kFloat:
      return v.as_float() == o.as_float();
    default:
      return v.identity() == o.identity();
  }
}

bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
  return equals(v, arg(a, "eq"));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
  return !equals(v, arg(a, "ne"));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return compare(v, arg(a, "lt")) < 0;
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  return compare(v, arg(a, "le")) <= 0;
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return compare(v, arg(a, "gt")) > 0;
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  return compare(v, arg(a, "ge")) >= 0;
}

bool t_filter(Interpreter& in, const Value& v, CallArgs& a) {
  bind("filter", a, {});
  return v.is_string() && in.has_filter(v.str());
}
bool t_test(Interpreter& in, const Value& v, CallArgs& a) {
  bind("test", a, {});
  return v.is_string() && in.has_test(v.str());
}

struct Entry {
  const char* name;
  TestFn fn;
};

const Entry kTests[] = {
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"filter", t_filter},
    {"test", t_test},
    {"none", t_none},
    {"boolean", t_boolean},
    {"false", t_false},
    {"true", t_true},
    {"integer", t_integer},
    {"float", t_float},
    {"lower", t_lower},
    {"upper", t_upper},
    {"string", t_string},
    {"mapping", t_mapping},
    {"number", t_number},
    {"sequence", t_sequence},
    {"iterable", t_iterable},
    {"callable", t_callable},
    {"sameas", t_sameas},
    {"escaped", t_escaped},
    {"in", t_in},
    {"==", t_eq},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"!=", t_ne},
    {"ne", t_ne},
    {">", t_gt},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">=", t_ge},
    {"ge", t_ge},
    {"<", t_lt},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<=", t_le},
    {"le", t_le},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& e : kTests)
    if (name == e.name) return e.fn;
  return nullptr;
}

}  // namespace tachyon::jinja
