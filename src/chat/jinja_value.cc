#include "chat/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

// Nesting beyond this is refused so that printing, comparing and freeing values
// never recurse deeper than the stack allows.
constexpr int kMaxValueDepth = 512;

struct ListData {
  ValueList items;
  bool tuple = false;
};

int value_depth(const Value& v);

}  // namespace

void fail(std::string message) {
  throw TemplateError{std::move(message)};
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.p_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  v.i_ = b;
  v.f_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  return string(std::make_shared<const std::string>(std::move(s)));
}
Value Value::string(std::shared_ptr<const std::string> s) {
  Value v;
  v.type_ = Type::kString;
  v.p_ = std::const_pointer_cast<std::string>(std::move(s));
  return v;
}
Value Value::string(std::string s, Spans untrusted) {
  Value v = string(std::move(s));
  if (!untrusted.empty()) v.untrusted_ = std::make_shared<const Spans>(std::move(untrusted));
  return v;
}
const Spans& Value::untrusted() const {
  static const Spans kNone;
  return untrusted_ ? *untrusted_ : kNone;
}
Value Value::list(ValueList items, bool tuple) {
  int depth = 0;
  for (const auto& it : items) depth = std::max(depth, value_depth(it));
  if (depth + 1 > kMaxValueDepth) fail("value nesting too deep");
  auto d = std::make_shared<ListData>();
  d->items = std::move(items);
  d->tuple = tuple;
  Value v;
  v.type_ = Type::kList;
  v.i_ = depth + 1;
  v.p_ = std::move(d);
  return v;
}
Value Value::dict(std::shared_ptr<const Dict> d) {
  int depth = 0;
  for (const auto& [k, val] : d->entries()) depth = std::max(depth, value_depth(val));
  if (depth + 1 > kMaxValueDepth) fail("value nesting too deep");
  Value v;
  v.type_ = Type::kDict;
  v.i_ = depth + 1;
  v.p_ = std::const_pointer_cast<Dict>(std::move(d));
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.type_ = Type::kObject;
  v.p_ = std::move(o);
  return v;
}

bool Value::is_tuple() const {
  return type_ == Type::kList && static_cast<const ListData*>(p_.get())->tuple;
}
const ValueList& Value::items() const {
  return static_cast<const ListData*>(p_.get())->items;
}
const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return p_ ? *static_cast<const std::string*>(p_.get()) : kEmpty;
}

namespace {
int value_depth(const Value& v) {
  return (v.is_list() || v.is_dict()) ? static_cast<int>(v.as_int()) : 0;
}
}  // namespace

bool is_hashable(const Value& v) {
  switch (v.type()) {
    case Value::Type::kList:
      if (!v.is_tuple()) return false;
      for (const auto& it : v.items())
        if (!is_hashable(it)) return false;
      return true;
    case Value::Type::kDict:
      return false;
    default:
      return true;
  }
}

void Dict::set(Value key, Value value) {
  if (!is_hashable(key)) fail(fmt::format("unhashable type: '{}'", type_name(key)));
  if (key.is_string()) {
    auto it = string_index_.find(key.str());
    if (it != string_index_.end()) {
      entries_[it->second].second = std::move(value);
      return;
    }
    string_index_.emplace(key.str(), entries_.size());
    entries_.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& e : entries_) {
    if (!e.first.is_string() && equals(e.first, key)) {
      e.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

const Value* Dict::find(std::string_view key) const {
  auto it = string_index_.find(std::string(key));
  return it == string_index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  if (!is_hashable(key)) fail(fmt::format("unhashable type: '{}'", type_name(key)));
  for (const auto& e : entries_)
    if (!e.first.is_string() && equals(e.first, key)) return &e.second;
  return nullptr;
}

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

Value CallArgs::name_value(const std::string& name) const {
  if (!untrusted_names || name.empty()) return Value::string(name);
  return Value::string(name, Spans{{0, name.size()}});
}

Value Object::getattr(std::string_view name) const {
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(), name));
}
Value Object::call(Interpreter&, CallArgs&) {
  fail(fmt::format("'{}' object is not callable", type_name()));
}
std::string Object::repr() const {
  return fmt::format("<{} object>", type_name());
}

Value Namespace::getattr(std::string_view name) const {
  if (const Value* v = attrs.find(name)) return *v;
  return Object::getattr(name);
}
void Namespace::set(std::string_view name, Value v) {
  attrs.set(Value::string(std::string(name)), std::move(v));
}
std::string Namespace::repr() const {
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [k, v] : attrs.entries()) {
    if (!first) out += ", ";
    first = false;
    out += jinja::repr(k);
    out += ": ";
    out += jinja::repr(v);
  }
  return out + "}>";
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return false;
    case Value::Type::kBool:
      return v.as_bool();
    case Value::Type::kInt:
      return v.as_int() != 0;
    case Value::Type::kFloat:
      return v.as_float() != 0;
    case Value::Type::kString:
      return !v.str().empty();
    case Value::Type::kList:
      return !v.items().empty();
    case Value::Type::kDict:
      return v.dict().size() != 0;
    case Value::Type::kObject:
      return true;
  }
  return false;
}

void append_str(std::string& out, const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return;
    case Value::Type::kString:
      out += v.str();
      return;
    case Value::Type::kNone:
      out += "None";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::kFloat:
      out += py_float_repr(v.as_float());
      return;
    default:
      out += repr(v);
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str(out, v);
  return out;
}

std::string repr(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return "Undefined";
    case Value::Type::kString:
      return py_repr_string(v.str());
    case Value::Type::kList: {
      bool tuple = v.is_tuple();
      std::string out = tuple ? "(" : "[";
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += repr(items[i]);
      }
      if (tuple && items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Value::Type::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += repr(k);
        out += ": ";
        out += repr(val);
      }
      return out + "}";
    }
    case Value::Type::kObject:
      return v.obj().repr();
    default:
      return to_str(v);
  }
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return "Undefined";
    case Value::Type::kNone:
      return "NoneType";
    case Value::Type::kBool:
      return "bool";
    case Value::Type::kInt:
      return "int";
    case Value::Type::kFloat:
      return "float";
    case Value::Type::kString:
      return "str";
    case Value::Type::kList:
      return v.is_tuple() ? "tuple" : "list";
    case Value::Type::kDict:
      return "dict";
    case Value::Type::kObject:
      return v.obj().type_name();
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.str() == b.str();
    case Value::Type::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Type::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().entries()) {
        const Value* other = b.dict().find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Type::kObject:
      return a.identity() == b.identity();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    fail(u.undefined_hint().empty() ? std::string("undefined value used in comparison")
                                    : u.undefined_hint());
  }
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float())
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    double x = a.to_double(), y = b.to_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size());
  }
  fail(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a),
                   type_name(b)));
}

namespace {

std::string json_key(const Value& k) {
  switch (k.type()) {
    case Value::Type::kString:
      return k.str();
    case Value::Type::kBool:
      return k.as_bool() ? "true" : "false";
    case Value::Type::kNone:
      return "null";
    case Value::Type::kInt:
      return std::to_string(k.as_int());
    case Value::Type::kFloat:
      return py_float_repr(k.as_float());
    default:
      fail(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(k)));
  }
}

void newline_indent(std::string& out, const JsonFormat& jf, int level) {
  out.push_back('\n');
  for (int i = 0; i < level; ++i) out += jf.indent;
}

}  // namespace

void dump_json(std::string& out, const Value& v, const JsonFormat& jf, int depth) {
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::kFloat: {
      double f = v.as_float();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f < 0 ? "-Infinity" : "Infinity";
      } else {
        out += py_float_repr(f);
      }
      return;
    }
    case Value::Type::kString:
      json_quote(out, v.str(), jf.ensure_ascii);
      return;
    case Value::Type::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      if (jf.has_indent) newline_indent(out, jf, depth + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += jf.item_sep;
          if (jf.has_indent) newline_indent(out, jf, depth + 1);
        }
        dump_json(out, items[i], jf, depth + 1);
      }
      if (jf.has_indent) newline_indent(out, jf, depth);
      out.push_back(']');
      return;
    }
    case Value::Type::kDict: {
      const auto& entries = v.dict().entries();
      if (entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> order;
      order.reserve(entries.size());
      for (const auto& e : entries) order.push_back(&e);
      if (jf.sort_keys) {
        std::stable_sort(order.begin(), order.end(),
                         [](auto* x, auto* y) { return compare(x->first, y->first) < 0; });
      }
      out.push_back('{');
      if (jf.has_indent) newline_indent(out, jf, depth + 1);
      bool first = true;
      for (const auto* e : order) {
        if (!first) {
          out += jf.item_sep;
          if (jf.has_indent) newline_indent(out, jf, depth + 1);
        }
        first = false;
        json_quote(out, json_key(e->first), jf.ensure_ascii);
        out += jf.key_sep;
        dump_json(out, e->second, jf, depth + 1);
      }
      if (jf.has_indent) newline_indent(out, jf, depth);
      out.push_back('}');
      return;
    }
    default:
      fail(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

template <typename J>
Value from_json(const J& j, bool untrusted) {
  struct Conv {
    static Value str(std::string s, bool untrusted) {
      if (!untrusted || s.empty()) return Value::string(std::move(s));
      const size_t n = s.size();
      return Value::string(std::move(s), Spans{{0, n}});
    }
    static Value run(const J& j, int depth, bool untrusted) {
      if (depth > kMaxValueDepth) fail("input nesting too deep");
      switch (j.type()) {
        case J::value_t::null:
          return Value::none();
        case J::value_t::boolean:
          return Value::boolean(j.template get<bool>());
        case J::value_t::number_integer:
          return Value::integer(j.template get<int64_t>());
        case J::value_t::number_unsigned: {
          uint64_t u = j.template get<uint64_t>();
          if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
          return Value::integer(static_cast<int64_t>(u));
        }
        case J::value_t::number_float:
          return Value::floating(j.template get<double>());
        case J::value_t::string:
          return str(j.template get<std::string>(), untrusted);
        case J::value_t::array: {
          ValueList items;
          items.reserve(j.size());
          for (const auto& e : j) items.push_back(run(e, depth + 1, untrusted));
          return Value::list(std::move(items));
        }
        case J::value_t::object: {
          auto d = std::make_shared<Dict>();
          for (auto it = j.begin(); it != j.end(); ++it)
            d->set(str(it.key(), untrusted), run(it.value(), depth + 1, untrusted));
          return Value::dict(std::move(d));
        }
        default:
          fail("unsupported JSON value (binary)");
      }
    }
  };
  return Conv::run(j, 0, untrusted);
}

template Value from_json<nlohmann::json>(const nlohmann::json&, bool);
template Value from_json<nlohmann::ordered_json>(const nlohmann::ordered_json&, bool);

}  // namespace tachyon::jinja
