// Filters on text and numbers (case, whitespace, indent, formatting, numeric
// conversions, rounding, tojson); the sequence filters are in jinja_filters.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

using P = Param;
Value str_v(std::string s) {
  return Value::string(std::move(s));
}
Value none_v() {
  return Value::none();
}
Value int_v(int64_t i) {
  return Value::integer(i);
}
Value bool_v(bool b) {
  return Value::boolean(b);
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("trim", a, {{"chars", none_v()}});
  std::optional<std::string> chars;
  if (!p[0].is_none()) chars = to_str(p[0]);
  return str_v(py_strip(to_str(v), chars, true, true));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& a) {
  bind("upper", a, {});
  return str_v(py_upper(to_str(v)));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& a) {
  bind("lower", a, {});
  return str_v(py_lower(to_str(v)));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) {
  bind("capitalize", a, {});
  return str_v(py_capitalize(to_str(v)));
}

Value f_title(Interpreter&, const Value& v, CallArgs& a) {
  bind("title", a, {});
  return str_v(jinja_title(to_str(v)));
}

Value f_string(Interpreter&, const Value& v, CallArgs& a) {
  bind("string", a, {});
  return v.is_string() ? v : str_v(to_str(v));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
  bind("escape", a, {});
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return str_v(std::move(out));
}

Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
  bind("safe", a, {});
  return v.is_string() ? v : str_v(to_str(v));
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
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be common, ceil or floor");
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
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' ||
          c == '-'))
      return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

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
    int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                          : 99;
    if (d >= base) return std::nullopt;
    acc = acc * base + d;
    if (acc > static_cast<__int128>(INT64_MAX) + 1)
      fail("integer overflow (integers beyond 64 bits are not supported)");
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
  auto p =
      bind("indent", a, {{"width", int_v(4)}, {"first", bool_v(false)}, {"blank", bool_v(false)}});
  std::string ind =
      p[0].is_string()
          ? p[0].str()
          : std::string(static_cast<size_t>(std::max<int64_t>(
                            0, std::min<int64_t>(to_int_arg(p[0], "indent"), 1 << 20))),
                        ' ');
  if (!v.is_string())
    fail(fmt::format("can only concatenate {} (not \"str\") to {}", type_name(v), type_name(v)));
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
  return str_v(std::string(static_cast<size_t>(left), ' ') + s +
               std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("truncate", a,
                {{"length", int_v(255)},
                 {"killwords", bool_v(false)},
                 {"end", str_v("...")},
                 {"leeway", none_v()}});
  std::string s = to_str(v), end = to_str(p[2]);
  int64_t length = to_int_arg(p[0], "truncate"),
          leeway = p[3].is_none() ? 5 : to_int_arg(p[3], "truncate");
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
      if (e != std::string::npos) {
        i = e + 3;
        continue;
      }
    }
    if (s[i] == '<') {
      size_t e = s.find('>', i + 1);
      if (e != std::string::npos) {
        i = e + 1;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&amp;", "&"},  {"&lt;", "<"},  {"&gt;", ">"},         {"&quot;", "\""},
      {"&#34;", "\""}, {"&#39;", "'"}, {"&nbsp;", "\xc2\xa0"}};
  for (auto [from, to] : kEntities) out = py_replace(out, from, to, -1);
  std::string joined;
  for (auto& w : py_split(out, std::nullopt, -1, false)) joined += (joined.empty() ? "" : " ") + w;
  return str_v(joined);
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty())
    fail("can't handle positional and keyword arguments at the same time");
  if (!a.kwargs.empty()) {
    auto d = std::make_shared<Dict>();
    for (auto& [k, x] : a.kwargs) d->set(str_v(k), x);
    return str_v(percent_format(in, to_str(v), Value::dict(d)));
  }
  return str_v(percent_format(in, to_str(v), Value::list(a.args, true)));
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("tojson", a,
                {{"ensure_ascii", bool_v(false)},
                 {"indent", none_v()},
                 {"separators", none_v()},
                 {"sort_keys", bool_v(false)}});
  JsonFormat f;
  f.ensure_ascii = truthy(p[0]);
  if (!p[1].is_none()) {
    f.has_indent = true;
    f.indent = p[1].is_string() ? p[1].str()
                                : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                  to_int_arg(p[1], "tojson"), 0, 1 << 10)),
                                              ' ');
    f.item_sep = ",";
  }
  if (!p[2].is_none()) {
    if (!p[2].is_list() || p[2].items().size() != 2)
      fail("tojson: separators must be a pair of strings");
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

const Entry kTextFilters[] = {
    {"abs", f_abs},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"e", f_escape},
    {"escape", f_escape},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"lower", f_lower},
    {"replace", f_replace},
    {"round", f_round},
    {"safe", f_safe},
    {"string", f_string},
    {"striptags", f_striptags},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_text_filter(std::string_view name) {
  for (const auto& e : kTextFilters)
    if (name == e.name) return e.fn;
  return nullptr;
}

}  // namespace tachyon::jinja
