// The filters of jinja2 that chat templates use, with jinja2's argument names,
// defaults and results (including its one-shot iterators). tojson is the
// variant transformers installs: json.dumps with ensure_ascii=False by default.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

using P = Param;
Value str_v(std::string s) { return Value::string(std::move(s)); }
Value none_v() { return Value::none(); }
Value int_v(int64_t i) { return Value::integer(i); }
Value bool_v(bool b) { return Value::boolean(b); }

// "a.b.0" -> ["a", "b", 0] applied with getitem, as jinja2's attribute getters do.
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none() || attribute.is_undefined()) return parts;
  if (!attribute.is_string()) return {attribute};
  for (auto& p : py_split(attribute.str(), std::string("."), -1, false)) {
    bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits && p.size() < 18 ? int_v(std::stoll(p)) : str_v(p));
  }
  return parts;
}

Value lower_if_str(const Value& v) { return v.is_string() ? str_v(py_lower(v.str())) : v; }

Value get_attribute(Interpreter& in, Value item, const std::vector<Value>& parts, const Value* dflt) {
  for (const auto& p : parts) {
    item = in.getitem(item, p);
    if (dflt && item.is_undefined()) item = *dflt;
  }
  return item;
}

int64_t len_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return 0;
    case Value::Type::kString: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Type::kList: return static_cast<int64_t>(v.items().size());
    case Value::Type::kDict: return static_cast<int64_t>(v.dict().size());
    case Value::Type::kObject:
      if (auto* ns = dynamic_cast<Namespace*>(&v.obj())) (void)ns;
      [[fallthrough]];
    default:
      fail(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  bind("length", a, {});
  return int_v(len_of(v));
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("default", a, {{"default_value", str_v("")}, {"boolean", bool_v(false)}});
  if (v.is_undefined() || (truthy(p[1]) && !truthy(v))) return p[0];
  return v;
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("trim", a, {{"chars", none_v()}});
  std::optional<std::string> chars;
  if (!p[0].is_none()) chars = to_str(p[0]);
  return str_v(py_strip(to_str(v), chars, true, true));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& a) { bind("upper", a, {}); return str_v(py_upper(to_str(v))); }
Value f_lower(Interpreter&, const Value& v, CallArgs& a) { bind("lower", a, {}); return str_v(py_lower(to_str(v))); }
Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) { bind("capitalize", a, {}); return str_v(py_capitalize(to_str(v))); }
Value f_title(Interpreter&, const Value& v, CallArgs& a) { bind("title", a, {}); return str_v(jinja_title(to_str(v))); }
Value f_string(Interpreter&, const Value& v, CallArgs& a) { bind("string", a, {}); return v.is_string() ? v : str_v(to_str(v)); }

Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
  bind("escape", a, {});
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return str_v(std::move(out));
}

Value f_safe(Interpreter&, const Value& v, CallArgs& a) { bind("safe", a, {}); return v.is_string() ? v : str_v(to_str(v)); }

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("join", a, {{"d", str_v("")}, {"attribute", none_v()}});
  auto parts = attribute_parts(p[1]);
  std::string sep = to_str(p[0]), out;
  bool first = true;
  for (const auto& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(out, parts.empty() ? item : get_attribute(in, item, parts, nullptr));
    in.check_string(out.size());
  }
  return str_v(std::move(out));
}

Value f_first(Interpreter& in, const Value& v, CallArgs& a) {
  bind("first", a, {});
  if (v.is_object())
    if (auto* it = dynamic_cast<IteratorObject*>(&v.obj())) {
      if (auto x = it->take_one()) return *x;
      return Value::undefined("No first item, sequence was empty.");
    }
  if (v.is_list()) return v.items().empty() ? Value::undefined("No first item, sequence was empty.") : v.items()[0];
  ValueList items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
}

Value f_last(Interpreter& in, const Value& v, CallArgs& a) {
  bind("last", a, {});
  if (v.is_object() && dynamic_cast<IteratorObject*>(&v.obj()))
    fail("'generator' object is not reversible");
  if (v.is_list()) return v.items().empty() ? Value::undefined("No last item, sequence was empty.") : v.items().back();
  ValueList items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(Interpreter& in, const Value& v, CallArgs& a) {
  bind("list", a, {});
  if (v.is_list() && !v.is_tuple()) return v;
  return Value::list(in.iterate(v));
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  bind("items", a, {});
  if (v.is_undefined()) return make_iterator({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.dict().entries()) out.push_back(Value::list({k, val}, true));
  return make_iterator(std::move(out), "dict_itemiterator");
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs& a) {
  bind("reverse", a, {});
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return str_v(utf8_encode(u));
  }
  bool iter = v.is_object() && dynamic_cast<IteratorObject*>(&v.obj());
  ValueList items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  if (iter) return Value::list(std::move(items));
  return make_iterator(std::move(items), v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
}

// Python's sorted(): stable, comparing keys with Python's ordering.
void sort_by_keys(ValueList& items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? compare(keys[y], keys[x]) < 0 : compare(keys[x], keys[y]) < 0;
  });
  ValueList sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("sort", a, {{"reverse", bool_v(false)}, {"case_sensitive", bool_v(false)}, {"attribute", none_v()}});
  ValueList items = in.iterate(v);
  std::vector<std::vector<Value>> attrs;
  if (p[2].is_string()) {
    for (auto& part : py_split(p[2].str(), std::string(","), -1, false)) attrs.push_back(attribute_parts(str_v(part)));
  } else {
    attrs.push_back(attribute_parts(p[2]));
  }
  std::vector<Value> keys;
  for (const auto& item : items) {
    ValueList k;
    for (const auto& parts : attrs) {
      Value x = get_attribute(in, item, parts, nullptr);
      k.push_back(truthy(p[1]) ? x : lower_if_str(x));
    }
    keys.push_back(Value::list(std::move(k)));
  }
  in.step(static_cast<int64_t>(items.size() * 16));
  sort_by_keys(items, std::move(keys), truthy(p[0]));
  return Value::list(std::move(items));
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("dictsort", a, {{"case_sensitive", bool_v(false)}, {"by", str_v("key")}, {"reverse", bool_v(false)}});
  std::string by = to_str(p[1]);
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) fail(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
  ValueList items;
  std::vector<Value> keys;
  for (const auto& [k, val] : v.dict().entries()) {
    items.push_back(Value::list({k, val}, true));
    const Value& key = by == "key" ? k : val;
    keys.push_back(truthy(p[0]) ? key : lower_if_str(key));
  }
  in.step(static_cast<int64_t>(items.size() * 16));
  sort_by_keys(items, std::move(keys), truthy(p[2]));
  return Value::list(std::move(items));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("unique", a, {{"case_sensitive", bool_v(false)}, {"attribute", none_v()}});
  auto parts = attribute_parts(p[1]);
  ValueList out, seen;
  for (const auto& item : in.iterate(v)) {
    Value key = get_attribute(in, item, parts, nullptr);
    if (!truthy(p[0])) key = lower_if_str(key);
    if (!is_hashable(key)) fail(fmt::format("unhashable type: '{}'", type_name(key)));
    in.step(static_cast<int64_t>(seen.size()));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return make_iterator(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  auto p = bind(want_max ? "max" : "min", a, {{"case_sensitive", bool_v(false)}, {"attribute", none_v()}});
  auto parts = attribute_parts(p[1]);
  ValueList items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = get_attribute(in, items[i], parts, nullptr);
    if (!truthy(p[0])) key = lower_if_str(key);
    if (i == 0 || (want_max ? compare(key, best_key) > 0 : compare(key, best_key) < 0)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("sum", a, {{"attribute", none_v()}, {"start", int_v(0)}});
  auto parts = attribute_parts(p[0]);
  if (p[1].is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
  Value total = p[1];
  for (const auto& item : in.iterate(v)) total = binary_op(in, "+", total, get_attribute(in, item, parts, nullptr));
  return total;
}

Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  bind("abs", a, {});
  if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) fail("integer overflow");
    return int_v(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  fail(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("round", a, {{"precision", int_v(0)}, {"method", str_v("common")}});
  std::string method = to_str(p[1]);
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  int64_t prec = to_int_arg(p[0], "round");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) fail(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  if (method == "common") {
    if (!v.is_float()) return int_v(v.as_int());  // round(int, n) keeps the int
    double x = v.as_float();
    if (!std::isfinite(x)) return v;
    if (prec >= 0 && prec <= 300) {
      // printf rounds the exact binary value half-to-even, as Python's round() does.
      std::string s = fmt::format("{:.{}f}", x, prec);
      return Value::floating(std::strtod(s.c_str(), nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-prec));
    return Value::floating(std::nearbyint(x / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.to_double() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

// Python's float() of a string: whitespace, underscores between digits, inf/nan.
std::optional<double> parse_py_float(std::string_view s) {
  std::string t = py_strip(s, std::nullopt, true, true), clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (i == 0 || i + 1 == t.size() || !std::isdigit(static_cast<unsigned char>(t[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(t[i + 1])))
        return std::nullopt;
      continue;
    }
    clean.push_back(t[i]);
  }
  if (clean.empty()) return std::nullopt;
  std::string low = py_lower(clean);
  std::string_view body = low;
  double sign = 1;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1 : 1;
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  for (char c : body)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

// Python's int(s, base) for base 10 (and other bases with their prefixes).
std::optional<int64_t> parse_py_int(std::string_view s, int base) {
  std::string t = py_strip(s, std::nullopt, true, true), clean;
  bool neg = false;
  std::string_view b = t;
  if (!b.empty() && (b[0] == '+' || b[0] == '-')) {
    neg = b[0] == '-';
    b.remove_prefix(1);
  }
  if (b.size() > 2 && b[0] == '0') {
    char k = static_cast<char>(std::tolower(b[1]));
    if ((k == 'x' && (base == 16 || base == 0)) || (k == 'o' && (base == 8 || base == 0)) ||
        (k == 'b' && (base == 2 || base == 0))) {
      base = k == 'x' ? 16 : k == 'o' ? 8 : 2;
      b.remove_prefix(2);
      if (!b.empty() && b[0] == '_') b.remove_prefix(1);
    }
  }
  if (base == 0) base = 10;
  if (b.empty() || b.front() == '_' || b.back() == '_') return std::nullopt;
  __int128 acc = 0;
  char prev = 0;
  for (char c : b) {
    if (c == '_') {
      if (prev == '_') return std::nullopt;
      prev = c;
      continue;
    }
    prev = c;
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    acc = acc * base + d;
    if (acc > static_cast<__int128>(INT64_MAX) + 1) fail("integer overflow (integers beyond 64 bits are not supported)");
  }
  if (neg) acc = -acc;
  if (acc > INT64_MAX) fail("integer overflow (integers beyond 64 bits are not supported)");
  return static_cast<int64_t>(acc);
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("int", a, {{"default", int_v(0)}, {"base", int_v(10)}});
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int() || v.is_bool()) return int_v(v.as_int());
  auto from_float = [&](double d) -> Value {
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return p[0];
    return int_v(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.is_float()) return from_float(v.as_float());
  if (v.is_string()) {
    if (auto i = parse_py_int(v.str(), static_cast<int>(to_int_arg(p[1], "int")))) return int_v(*i);
    if (auto d = parse_py_float(v.str())) return from_float(*d);
  }
  return p[0];
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("float", a, {{"default", Value::floating(0.0)}});
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::floating(v.to_double());
  if (v.is_string())
    if (auto d = parse_py_float(v.str())) return Value::floating(*d);
  return p[0];
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("replace", a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", none_v()}});
  int64_t count = p[2].is_none() ? -1 : to_int_arg(p[2], "replace");
  std::string s = to_str(v), old = to_str(p[0]), repl = to_str(p[1]);
  size_t n = py_count(s, old);
  if (repl.size() > old.size()) in.check_string(s.size() + n * (repl.size() - old.size()));
  return str_v(py_replace(s, old, repl, count));
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("indent", a, {{"width", int_v(4)}, {"first", bool_v(false)}, {"blank", bool_v(false)}});
  std::string ind = p[0].is_string() ? p[0].str() : std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(to_int_arg(p[0], "indent"), 1 << 20))), ' ');
  if (!v.is_string()) fail(fmt::format("can only concatenate {} (not \"str\") to {}", type_name(v), type_name(v)));
  std::vector<std::string> lines = py_splitlines(v.str() + "\n");
  in.check_string(v.str().size() + lines.size() * (ind.size() + 1));
  std::string rv;
  if (truthy(p[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += ind;
        rv += lines[i];
      }
    }
  }
  if (truthy(p[1])) rv = ind + rv;
  return str_v(std::move(rv));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("center", a, {{"width", int_v(80)}});
  std::string s = to_str(v);
  int64_t width = to_int_arg(p[0], "center"), len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return str_v(s);
  in.check_string(static_cast<size_t>(width));
  int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
  return str_v(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("truncate", a, {{"length", int_v(255)}, {"killwords", bool_v(false)}, {"end", str_v("...")}, {"leeway", none_v()}});
  std::string s = to_str(v), end = to_str(p[2]);
  int64_t length = to_int_arg(p[0], "truncate"), leeway = p[3].is_none() ? 5 : to_int_arg(p[3], "truncate");
  int64_t end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len) fail(fmt::format("expected length >= {}, got {}", end_len, length));
  if (leeway < 0) fail(fmt::format("expected leeway >= 0, got {}", leeway));
  if (static_cast<int64_t>(utf8_length(s)) <= length + leeway) return str_v(s);
  std::string head = s.substr(0, utf8_offset(s, static_cast<size_t>(length - end_len)));
  if (truthy(p[1])) return str_v(head + end);
  return str_v(py_split(head, std::string(" "), 1, true)[0] + end);
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& a) {
  bind("wordcount", a, {});
  std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = utf8_next(s, pos);
    bool w = c == '_' || py_isalnum(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return int_v(n);
}

Value f_striptags(Interpreter&, const Value& v, CallArgs& a) {
  bind("striptags", a, {});
  std::string s = to_str(v), out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      size_t e = s.find("-->", i + 4);
      if (e != std::string::npos) { i = e + 3; continue; }
    }
    if (s[i] == '<') {
      size_t e = s.find('>', i + 1);
      if (e != std::string::npos) { i = e + 1; continue; }
    }
    out.push_back(s[i++]);
  }
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#34;", "\""}, {"&#39;", "'"}, {"&nbsp;", "\xc2\xa0"}};
  for (auto [from, to] : kEntities) out = py_replace(out, from, to, -1);
  std::string joined;
  for (auto& w : py_split(out, std::nullopt, -1, false)) joined += (joined.empty() ? "" : " ") + w;
  return str_v(joined);
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) fail("can't handle positional and keyword arguments at the same time");
  if (!a.kwargs.empty()) {
    auto d = std::make_shared<Dict>();
    for (auto& [k, x] : a.kwargs) d->set(str_v(k), x);
    return str_v(percent_format(in, to_str(v), Value::dict(d)));
  }
  return str_v(percent_format(in, to_str(v), Value::list(a.args, true)));
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("attr", a, {{"name", std::nullopt}});
  std::string name = str_arg(p[0], "attr");
  // Python getattr only: a dict's keys are not attributes here.
  if (v.is_dict() && !has_method(v, name))
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(v), name));
  return in.getattr(v, name);
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("batch", a, {{"linecount", std::nullopt}, {"fill_with", none_v()}});
  int64_t n = to_int_arg(p[0], "batch");
  if (n <= 0) fail("batch size must be positive");
  ValueList out, cur;
  for (auto& item : in.iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (!p[1].is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return make_iterator(std::move(out));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  ValueList out;
  const Value* attr = a.kwarg("attribute");
  if (a.args.empty() && attr) {
    const Value* dflt = a.kwarg("default");
    for (auto& [k, x] : a.kwargs)
      if (k != "attribute" && k != "default") fail(fmt::format("Unexpected keyword argument '{}'", k));
    auto parts = attribute_parts(*attr);
    Value d = dflt ? *dflt : none_v();
    for (auto& item : in.iterate(v)) out.push_back(get_attribute(in, item, parts, d.is_none() ? nullptr : &d));
    return make_iterator(std::move(out));
  }
  if (a.args.empty()) fail("map requires a filter argument");
  std::string name = str_arg(a.args[0], "map");
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (auto& item : in.iterate(v)) {
    CallArgs copy = rest;
    out.push_back(in.filter(name, item, copy));
  }
  return make_iterator(std::move(out));
}

Value select_reject(Interpreter& in, const Value& v, CallArgs& a, bool select, bool by_attr) {
  ValueList out;
  if (!truthy(v)) return make_iterator({});
  std::vector<Value> parts;
  size_t off = 0;
  if (by_attr) {
    if (a.args.empty()) fail("Missing parameter for attribute name");
    parts = attribute_parts(a.args[0]);
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs rest;
  if (a.args.size() > off) {
    test = str_arg(a.args[off], "select");
    rest.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(off + 1), a.args.end());
    rest.kwargs = a.kwargs;
  }
  for (auto& item : in.iterate(v)) {
    Value x = by_attr ? get_attribute(in, item, parts, nullptr) : item;
    bool r;
    if (test) {
      CallArgs copy = rest;
      r = in.test(*test, x, copy);
    } else {
      r = truthy(x);
    }
    if (r == select) out.push_back(item);
  }
  return make_iterator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, true, false); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, false, true); }

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("tojson", a, {{"ensure_ascii", bool_v(false)}, {"indent", none_v()}, {"separators", none_v()}, {"sort_keys", bool_v(false)}});
  JsonFormat f;
  f.ensure_ascii = truthy(p[0]);
  if (!p[1].is_none()) {
    f.has_indent = true;
    f.indent = p[1].is_string() ? p[1].str() : std::string(static_cast<size_t>(std::clamp<int64_t>(to_int_arg(p[1], "tojson"), 0, 1 << 10)), ' ');
    f.item_sep = ",";
  }
  if (!p[2].is_none()) {
    if (!p[2].is_list() || p[2].items().size() != 2) fail("tojson: separators must be a pair of strings");
    f.item_sep = str_arg(p[2].items()[0], "tojson");
    f.key_sep = str_arg(p[2].items()[1], "tojson");
  }
  f.sort_keys = truthy(p[3]);
  std::string out;
  dump_json(out, v, f);
  in.check_string(out.size());
  return str_v(std::move(out));
}

struct Entry {
  const char* name;
  FilterFn fn;
};

const Entry kFilters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
    {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr},
    {"sort", f_sort}, {"string", f_string}, {"striptags", f_striptags}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& e : kFilters)
    if (name == e.name) return e.fn;
  return nullptr;
}

}  // namespace tachyon::jinja
