// Methods of str, list and dict values as Python has them (`s.strip()`,
// `d.items()`, ...). Mutating list/dict methods exist but are refused, as jinja2's
// ImmutableSandboxedEnvironment refuses them.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

constexpr std::array kStrMethods = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
constexpr std::array kListMethods = {"append", "clear", "copy",   "count",   "extend", "index",
                                     "insert", "pop",   "remove", "reverse", "sort"};
constexpr std::array kTupleMethods = {"count", "index"};
constexpr std::array kDictMethods = {"clear", "copy",    "fromkeys",   "get",    "items", "keys",
                                     "pop",   "popitem", "setdefault", "update", "values"};
constexpr std::array kListUnsafe = {"append", "clear", "pop",    "reverse",
                                    "insert", "sort",  "extend", "remove"};
constexpr std::array kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
bool in_list(const std::array<const char*, N>& a, std::string_view n) {
  return std::any_of(a.begin(), a.end(), [&](const char* x) { return n == x; });
}

Value str_v(std::string s) {
  return Value::string(std::move(s));
}

std::optional<std::string> opt_chars(const Value& v) {
  if (v.is_none()) return std::nullopt;
  return str_arg(v, "strip");
}

// Clamps Python-style [start, end) code point bounds to byte offsets.
std::pair<size_t, size_t> bounds(const std::string& s, const Value& start, const Value& end) {
  int64_t n = static_cast<int64_t>(utf8_length(s));
  auto norm = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t x = to_int_arg(v, "slice");
    if (x < 0) x = std::max<int64_t>(0, x + n);
    return std::min(x, n);
  };
  int64_t a = norm(start, 0), b = norm(end, n);
  if (a > b) return {std::string::npos, std::string::npos};
  return {utf8_offset(s, static_cast<size_t>(a)), utf8_offset(s, static_cast<size_t>(b))};
}

Value find_impl(const std::string& s, CallArgs& a, bool reverse, bool raise, const char* fn) {
  auto p = bind(fn, a, {{"sub", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
  std::string sub = str_arg(p[0], fn);
  auto [lo, hi] = bounds(s, p[1], p[2]);
  size_t at = std::string::npos;
  if (lo != std::string::npos && hi - lo >= sub.size()) {
    std::string_view window = std::string_view(s).substr(lo, hi - lo);
    size_t f = reverse ? window.rfind(sub) : window.find(sub);
    if (f != std::string_view::npos) at = lo + f;
  }
  if (at == std::string::npos) {
    if (raise) fail("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, at))));
}

Value affix_impl(const std::string& s, CallArgs& a, bool prefix) {
  const char* fn = prefix ? "startswith" : "endswith";
  auto p =
      bind(fn, a, {{"prefix", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
  auto [lo, hi] = bounds(s, p[1], p[2]);
  if (lo == std::string::npos) return Value::boolean(false);
  std::string_view w = std::string_view(s).substr(lo, hi - lo);
  auto check = [&](const Value& x) {
    std::string t = str_arg(x, fn);
    if (t.size() > w.size()) return false;
    return prefix ? w.substr(0, t.size()) == t : w.substr(w.size() - t.size()) == t;
  };
  if (p[0].is_list() && p[0].is_tuple()) {
    for (const auto& x : p[0].items())
      if (check(x)) return Value::boolean(true);
    return Value::boolean(false);
  }
  return Value::boolean(check(p[0]));
}

Value pad_impl(Interpreter& in, const std::string& s, CallArgs& a, char mode) {
  auto p = bind(mode == 'c'   ? "center"
                : mode == 'l' ? "ljust"
                              : "rjust",
                a, {{"width", std::nullopt}, {"fillchar", str_v(" ")}});
  int64_t width = to_int_arg(p[0], "width"), len = static_cast<int64_t>(utf8_length(s));
  std::string fill = str_arg(p[1], "fillchar");
  if (utf8_length(fill) != 1) fail("The fill character must be exactly one character long");
  if (width <= len) return str_v(s);
  in.check_string(static_cast<size_t>(width));
  in.charge(static_cast<size_t>(width) * fill.size());
  int64_t marg = width - len;
  int64_t left = mode == 'l' ? 0 : mode == 'r' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < marg; ++i) out += fill;
  return str_v(std::move(out));
}

// str.format(): {} / {0} / {name}, with .attr / [key] lookups, !r/!s, and a
// subset of format specs ([[fill]align][sign][0][width][.precision][type]).
std::string apply_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = spec.substr(0, 1);
    align = spec[1];
    i = 2;
  } else if (is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool zero = false;
  if (i < spec.size() && spec[i] == '0') {
    zero = true;
    ++i;
  }
  int width = 0, precision = -1;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
    width = std::min(width * 10 + (spec[i++] - '0'), 100000);
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    ++i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
      precision = std::min(precision * 10 + (spec[i++] - '0'), 1000);
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) fail(fmt::format("unsupported format specifier '{}'", spec));
  std::string body;
  bool numeric = v.is_number();
  if (v.is_string() || (!numeric && type == 0)) {
    body = to_str(v);
    if (precision >= 0) body = body.substr(0, utf8_offset(body, static_cast<size_t>(precision)));
  } else if (numeric && (type == 'd' || (type == 0 && !v.is_float()))) {
    body = std::to_string(v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int());
  } else if (numeric && (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' ||
                         type == 'G' || type == '%' || type == 0)) {
    double d = v.to_double();
    if (type == 0 && precision < 0) {
      body = to_str(Value::floating(d));
    } else {
      char t = type == 0 ? 'g' : type == '%' ? 'f' : type;
      body = fmt::format(fmt::runtime(fmt::format("{{:.{}{}}}", precision < 0 ? 6 : precision, t)),
                         type == '%' ? d * 100 : d);
      if (type == '%') body += "%";
    }
  } else {
    fail(fmt::format("unsupported format specifier '{}' for {}", spec, type_name(v)));
  }
  if (numeric && body[0] != '-' && (sign == '+' || sign == ' ')) body.insert(body.begin(), sign);
  int len = static_cast<int>(utf8_length(body));
  if (width > len) {
    int pad = width - len;
    if (zero && !align) {
      size_t at = (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
      body.insert(at, static_cast<size_t>(pad), '0');
      return body;
    }
    if (!align) align = numeric ? '>' : '<';
    int left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    std::string out;
    for (int k = 0; k < left; ++k) out += fill;
    out += body;
    for (int k = left; k < pad; ++k) out += fill;
    return out;
  }
  return body;
}

Value format_impl(Interpreter& in, const std::string& f, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}')
        ++i;
      else
        fail("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1), spec, conv;
    i = close;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t head_end = std::min(field.find('.'), field.find('['));
    std::string head = field.substr(0, head_end);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        })) {
      size_t idx = head.empty() ? auto_index++ : std::stoul(head);
      if (idx >= a.args.size())
        fail(fmt::format("Replacement index {} out of range for positional args tuple", idx));
      v = a.args[idx];
    } else {
      const Value* kw = a.kwarg(head);
      if (!kw) fail(fmt::format("'{}'", head));
      v = *kw;
    }
    for (size_t k = head_end; k < field.size();) {
      if (field[k] == '.') {
        size_t e = std::min(field.find('.', k + 1), field.find('[', k + 1));
        v = in.getattr(v, field.substr(k + 1, e - k - 1));
        k = e;
      } else {
        size_t e = field.find(']', k);
        if (e == std::string::npos) fail("Missing ']' in format string");
        std::string key = field.substr(k + 1, e - k - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        });
        v = in.getitem(v, digits ? Value::integer(std::stoll(key)) : str_v(key));
        k = e + 1;
      }
    }
    if (conv == "r")
      v = str_v(repr(v));
    else if (conv == "s")
      v = str_v(to_str(v));
    else if (!conv.empty())
      fail(fmt::format("Unknown conversion specifier {}", conv));
    out += apply_spec(v, spec);
    in.check_string(out.size());
  }
  in.charge(out.size());
  return str_v(std::move(out));
}

Value str_method(Interpreter& in, const std::string& s, std::string_view m, CallArgs& a) {
  auto noargs = [&]() { bind(std::string(m), a, {}); };
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    auto p = bind(std::string(m), a, {{"chars", Value::none()}});
    return str_v(py_strip(s, opt_chars(p[0]), m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    auto p = bind(std::string(m), a, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
    std::optional<std::string> sep;
    if (!p[0].is_none()) {
      sep = str_arg(p[0], m);
      if (sep->empty()) fail("empty separator");
    }
    ValueList out;
    for (auto& part : py_split(s, sep, to_int_arg(p[1], m), m == "rsplit"))
      out.push_back(str_v(std::move(part)));
    in.step(static_cast<int64_t>(out.size()));
    return Value::list(std::move(out));
  }
  if (m == "splitlines") {
    auto p = bind("splitlines", a, {{"keepends", Value::boolean(false)}});
    ValueList out;
    for (auto& part : py_splitlines(s, truthy(p[0]))) out.push_back(str_v(std::move(part)));
    return Value::list(std::move(out));
  }
  if (m == "startswith" || m == "endswith") return affix_impl(s, a, m == "startswith");
  if (m == "upper") return noargs(), str_v(py_upper(s));
  if (m == "lower" || m == "casefold") return noargs(), str_v(py_lower(s));
  if (m == "title") return noargs(), str_v(py_title(s));
  if (m == "capitalize") return noargs(), str_v(py_capitalize(s));
  if (m == "swapcase") return noargs(), str_v(py_swapcase(s));
  if (m == "replace") {
    auto p = bind("replace", a,
                  {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::integer(-1)}});
    std::string old = str_arg(p[0], m), repl = str_arg(p[1], m);
    if (repl.size() > old.size())
      in.charge(s.size() + py_count(s, old) * (repl.size() - old.size()));
    return str_v(py_replace(s, old, repl, to_int_arg(p[2], m)));
  }
  if (m == "find") return find_impl(s, a, false, false, "find");
  if (m == "rfind") return find_impl(s, a, true, false, "rfind");
  if (m == "index") return find_impl(s, a, false, true, "index");
  if (m == "rindex") return find_impl(s, a, true, true, "rindex");
  if (m == "count") {
    auto p =
        bind("count", a, {{"sub", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
    auto [lo, hi] = bounds(s, p[1], p[2]);
    if (lo == std::string::npos) return Value::integer(0);
    return Value::integer(
        static_cast<int64_t>(py_count(std::string_view(s).substr(lo, hi - lo), str_arg(p[0], m))));
  }
  if (m == "format") return format_impl(in, s, a);
  if (m == "center") return pad_impl(in, s, a, 'c');
  if (m == "ljust") return pad_impl(in, s, a, 'l');
  if (m == "rjust") return pad_impl(in, s, a, 'r');
  if (m == "zfill") {
    auto p = bind("zfill", a, {{"width", std::nullopt}});
    int64_t width = to_int_arg(p[0], m), len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return str_v(s);
    in.charge(static_cast<size_t>(width));
    size_t at = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    std::string out = s;
    out.insert(at, static_cast<size_t>(width - len), '0');
    return str_v(std::move(out));
  }
  if (m == "partition" || m == "rpartition") {
    auto p = bind(std::string(m), a, {{"sep", std::nullopt}});
    std::string sep = str_arg(p[0], m);
    if (sep.empty()) fail("empty separator");
    size_t f = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos)
      return m == "partition" ? Value::list({str_v(s), str_v(""), str_v("")}, true)
                              : Value::list({str_v(""), str_v(""), str_v(s)}, true);
    return Value::list({str_v(s.substr(0, f)), str_v(sep), str_v(s.substr(f + sep.size()))}, true);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    auto p = bind(std::string(m), a, {{"affix", std::nullopt}});
    std::string x = str_arg(p[0], m);
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0) return str_v(s.substr(x.size()));
    if (m == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0)
      return str_v(s.substr(0, s.size() - x.size()));
    return str_v(s);
  }
  if (m == "isupper") return noargs(), Value::boolean(py_isupper(s));
  if (m == "islower") return noargs(), Value::boolean(py_islower(s));
  if (m == "isdigit" || m == "isdecimal" || m == "isnumeric")
    return noargs(), Value::boolean(py_isdigit(s));
  if (m == "isalpha") return noargs(), Value::boolean(py_isalpha(s));
  if (m == "isalnum") return noargs(), Value::boolean(py_isalnum_str(s));
  if (m == "isascii")
    return noargs(), Value::boolean(std::all_of(s.begin(), s.end(), [](char c) {
             return static_cast<unsigned char>(c) < 0x80;
           }));
  if (m == "isspace") {
    noargs();
    std::u32string u = utf8_decode(s);
    return Value::boolean(!u.empty() && std::all_of(u.begin(), u.end(), py_isspace));
  }
  fail(fmt::format("str.{}() is not supported", m));
}

Value list_method(Interpreter& in, const Value& l, std::string_view m, CallArgs& a) {
  if (m == "count") {
    auto p = bind("count", a, {{"value", std::nullopt}});
    in.step(static_cast<int64_t>(l.items().size()));
    return Value::integer(std::count_if(l.items().begin(), l.items().end(),
                                        [&](const Value& x) { return equals(x, p[0]); }));
  }
  if (m == "index") {
    auto p = bind("index", a,
                  {{"value", std::nullopt},
                   {"start", Value::integer(0)},
                   {"stop", Value::integer(INT64_MAX)}});
    int64_t n = static_cast<int64_t>(l.items().size());
    int64_t lo = to_int_arg(p[1], m), hi = to_int_arg(p[2], m);
    if (lo < 0) lo = std::max<int64_t>(0, lo + n);
    if (hi < 0) hi = std::max<int64_t>(0, hi + n);
    for (int64_t i = lo; i < std::min(hi, n); ++i)
      if (equals(l.items()[static_cast<size_t>(i)], p[0])) return Value::integer(i);
    fail(fmt::format("{} is not in list", repr(p[0])));
  }
  if (m == "copy") {
    bind("copy", a, {});
    in.charge_items(l.items().size());
    return Value::list(l.items());
  }
  fail(fmt::format("{}.{}() is not supported", type_name(l), m));
}

Value dict_method(Interpreter& in, const Value& d, std::string_view m, CallArgs& a) {
  if (m == "get") {
    auto p = bind("get", a, {{"key", std::nullopt}, {"default", Value::none()}});
    const Value* v = d.dict().find(p[0]);
    return v ? *v : p[1];
  }
  ValueList out;
  if (m == "items" || m == "keys" || m == "values") {
    bind(std::string(m), a, {});
    in.charge_items((m == "items" ? 3 : 1) * d.dict().size());
    for (const auto& [k, v] : d.dict().entries())
      out.push_back(m == "items" ? Value::list({k, v}, true) : m == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (m == "copy") return bind("copy", a, {}), d;
  fail(fmt::format("dict.{}() is not supported", m));
}

}  // namespace

bool has_method(const Value& r, std::string_view name) {
  if (r.is_string()) return in_list(kStrMethods, name);
  if (r.is_list()) return r.is_tuple() ? in_list(kTupleMethods, name) : in_list(kListMethods, name);
  if (r.is_dict()) return in_list(kDictMethods, name);
  return false;
}

bool is_unsafe_method(const Value& r, std::string_view name) {
  if (r.is_list() && !r.is_tuple()) return in_list(kListUnsafe, name);
  if (r.is_dict()) return in_list(kDictUnsafe, name);
  return false;
}

namespace {
// str.join, keeping the untrusted spans of the separator and the items.
Value str_join(Interpreter& in, const Value& sep, CallArgs& a) {
  auto p = bind("join", a, {{"iterable", std::nullopt}});
  MarkedString out;
  size_t i = 0;
  for (const auto& item : in.iterate(p[0])) {
    if (!item.is_string())
      fail(fmt::format("sequence item {}: expected str instance, {} found", i, type_name(item)));
    if (i++) out.append(sep);
    out.append(item);
    in.check_string(out.size());
  }
  in.charge(out.bytes());
  return out.take();
}
}  // namespace

Value call_method(Interpreter& in, const Value& r, std::string_view name, CallArgs& args) {
  if (r.is_string() && name == "join") return str_join(in, r, args);
  if (r.is_string()) return mark_filter_result(name, str_method(in, r.str(), name, args), r, args);
  if (r.is_list()) return mark_derived(list_method(in, r, name, args), r, args);
  if (r.is_dict()) return mark_derived(dict_method(in, r, name, args), r, args);
  fail(fmt::format("'{}' object has no attribute '{}'", type_name(r), name));
}

}  // namespace tachyon::jinja
