#include "chat/jinja_strings.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "core/utf8.h"

namespace tachyon::jinja {

// The strings' UTF-8 through core/utf8: invalid input decodes to U+FFFD per maximal
// subpart (as Python's errors="replace"), and what is appended is always valid.
char32_t utf8_next(std::string_view s, size_t& pos) {
  size_t len = 0;
  const char32_t cp = utf8::decode(s, pos, len);
  pos += len;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  utf8::append(out, cp);
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(utf8_next(s, pos));
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool utf8_valid(std::string_view s) {
  return utf8::is_valid(s);
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

size_t utf8_offset(std::string_view s, size_t index) {
  size_t pos = 0;
  for (size_t i = 0; i < index; ++i) {
    if (pos >= s.size()) return std::string_view::npos;
    utf8_next(s, pos);
  }
  return pos;
}

bool py_isspace(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_alpha(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
}
bool is_numeric(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}
bool is_upper(char32_t c) {
  return category(c) == UTF8PROC_CATEGORY_LU;
}
bool is_lower(char32_t c) {
  return category(c) == UTF8PROC_CATEGORY_LL;
}
bool is_cased(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
char32_t to_upper(char32_t c) {
  return c < 0x80 ? (c >= 'a' && c <= 'z' ? c - 32 : c)
                  : static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_lower(char32_t c) {
  return c < 0x80 ? (c >= 'A' && c <= 'Z' ? c + 32 : c)
                  : static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_title(char32_t c) {
  return c < 0x80 ? to_upper(c)
                  : static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {  // full case mapping of the sharp s
    out += "SS";
    return;
  }
  utf8_append(out, to_upper(c));
}

template <typename F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) f(out, utf8_next(s, pos));
  return out;
}

bool is_linebreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

}  // namespace

bool py_isalnum(char32_t c) {
  return is_alpha(c) || is_numeric(c);
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return true;
  }
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t p = begin;
      if (!strip_it(utf8_next(s, p))) break;
      begin = p;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t p = start;
      if (!strip_it(utf8_next(s, p))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    const std::string& d = *sep;
    if (!from_right) {
      size_t start = 0;
      while (static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t f = s.find(d, start);
        if (f == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, f - start));
        start = f + d.size();
      }
      parts.emplace_back(s.substr(start));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (static_cast<int64_t>(rev.size()) < maxsplit && end >= d.size()) {
        size_t f = s.rfind(d, end - d.size());
        if (f == std::string_view::npos) break;
        rev.emplace_back(s.substr(f + d.size(), end - f - d.size()));
        end = f;
      }
      rev.emplace_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
    return parts;
  }
  // Whitespace split: runs of whitespace separate, ends are ignored.
  std::u32string u = utf8_decode(s);
  if (!from_right) {
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i == n) break;
      if (static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(utf8_encode(u.substr(i)));  // the rest keeps its trailing spaces
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      parts.push_back(utf8_encode(u.substr(i, j - i)));
      i = j;
    }
  } else {
    std::vector<std::string> rev;
    size_t i = u.size();
    while (true) {
      while (i > 0 && py_isspace(u[i - 1])) --i;
      if (i == 0) break;
      if (static_cast<int64_t>(rev.size()) == maxsplit) {
        rev.push_back(utf8_encode(u.substr(0, i)));  // the rest keeps its leading spaces
        break;
      }
      size_t j = i;
      while (j > 0 && !py_isspace(u[j - 1])) --j;
      rev.push_back(utf8_encode(u.substr(j, i - j)));
      i = j;
    }
    parts.assign(rev.rbegin(), rev.rend());
  }
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  size_t pos = 0, start = 0;
  while (pos < s.size()) {
    size_t before = pos;
    char32_t c = utf8_next(s, pos);
    if (!is_linebreak(c)) continue;
    size_t end_sep = pos;
    if (c == '\r' && pos < s.size() && s[pos] == '\n') end_sep = ++pos;
    lines.emplace_back(s.substr(start, (keepends ? end_sep : before) - start));
    start = end_sep;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string py_upper(std::string_view s) {
  return map_chars(s, [](std::string& o, char32_t c) { append_upper(o, c); });
}
std::string py_lower(std::string_view s) {
  return map_chars(s, [](std::string& o, char32_t c) { utf8_append(o, to_lower(c)); });
}
std::string py_swapcase(std::string_view s) {
  return map_chars(s, [](std::string& o, char32_t c) {
    if (is_upper(c)) {
      utf8_append(o, to_lower(c));
    } else if (is_lower(c)) {
      append_upper(o, c);
    } else {
      utf8_append(o, c);
    }
  });
}
std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_chars(s, [&](std::string& o, char32_t c) {
    utf8_append(o, first ? to_title(c) : to_lower(c));
    first = false;
  });
}
std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_chars(s, [&](std::string& o, char32_t c) {
    utf8_append(o, prev_cased ? to_lower(c) : to_title(c));
    prev_cased = is_cased(c);
  });
}

std::string jinja_title(std::string_view s) {
  // Pieces alternate between words and separator runs; each piece gets its first
  // character upper-cased and the rest lower-cased (separators are unaffected).
  auto is_sep = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  bool start_of_piece = true;
  bool prev_sep = false;
  while (pos < s.size()) {
    char32_t c = utf8_next(s, pos);
    bool sep = is_sep(c);
    if (pos != 0 && sep != prev_sep) start_of_piece = true;
    if (start_of_piece) {
      append_upper(out, c);
    } else {
      utf8_append(out, to_lower(c));
    }
    start_of_piece = false;
    prev_sep = sep;
  }
  return out;
}

namespace {
template <typename F>
bool all_chars(std::string_view s, F f) {
  if (s.empty()) return false;
  size_t pos = 0;
  while (pos < s.size())
    if (!f(utf8_next(s, pos))) return false;
  return true;
}
bool cased_check(std::string_view s, bool want_upper) {
  bool any = false;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = utf8_next(s, pos);
    if (want_upper ? is_lower(c) || category(c) == UTF8PROC_CATEGORY_LT
                   : is_upper(c) || category(c) == UTF8PROC_CATEGORY_LT)
      return false;
    any = any || is_cased(c);
  }
  return any;
}
}  // namespace

bool py_isupper(std::string_view s) {
  return cased_check(s, true);
}
bool py_islower(std::string_view s) {
  return cased_check(s, false);
}
bool py_isdigit(std::string_view s) {
  return all_chars(s, [](char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; });
}
bool py_isalpha(std::string_view s) {
  return all_chars(s, is_alpha);
}
bool py_isalnum_str(std::string_view s) {
  return all_chars(s, py_isalnum);
}

std::string py_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  size_t pos = 0;
  char buf[16];
  while (pos < s.size()) {
    char32_t c = utf8_next(s, pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x7F || py_isprintable(c)) {
      utf8_append(out, c);
    } else {
      if (c <= 0xFF) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c <= 0xFFFF) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  bool neg = false;
  if (!sci.empty() && sci[0] == '-') {
    neg = true;
    sci.remove_prefix(1);
  }
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits.push_back(c);
  int exp10 = std::atoi(std::string(sci.substr(e + 1)).c_str());
  int decpt = exp10 + 1;
  std::string out = neg ? "-" : "";
  int nd = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) {
      out += '.';
      out += digits.substr(1);
    }
    std::snprintf(buf, sizeof buf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += buf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= nd) {
    out += digits;
    out.append(static_cast<size_t>(decpt - nd), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    unsigned char c = static_cast<unsigned char>(ch);
    if (ensure_ascii && c >= 0x80) {
      size_t pos = i;
      char32_t cp = utf8_next(s, pos);
      i = pos - 1;
      char buf[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (static_cast<unsigned>(cp) >> 10),
                      0xDC00 + (static_cast<unsigned>(cp) & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

size_t py_count(std::string_view s, std::string_view needle) {
  if (needle.empty()) return utf8_length(s) + 1;
  size_t n = 0, pos = 0;
  while ((pos = s.find(needle, pos)) != std::string_view::npos) {
    ++n;
    pos += needle.size();
  }
  return n;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end.
    size_t pos = 0;
    int64_t done = 0;
    while (pos < s.size()) {
      if (done < count) {
        out += repl;
        ++done;
      }
      size_t start = pos;
      utf8_next(s, pos);
      out += s.substr(start, pos - start);
    }
    if (done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out += s.substr(pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

}  // namespace tachyon::jinja
