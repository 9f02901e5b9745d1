#include "chat/jinja_lexer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "chat/jinja_strings.h"
#include "chat/jinja_value.h"

namespace tachyon::jinja {

namespace {

// Newlines (\r\n, \r, \n) become \n; one trailing newline is dropped.
std::string normalize(std::string_view src, bool keep_trailing_newline) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    char c = src[i];
    if (c == '\r') {
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else {
      out.push_back(c);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexerOptions& opt) : s_(std::move(src)), opt_(opt) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) lex_root();
    push(Tok::kEof, "", pos_);
    return std::move(out_);
  }

 private:
  [[noreturn]] void error(const std::string& msg, size_t at) {
    auto [line, col] = line_col(at);
    throw TemplateError{msg, line, col};
  }

  std::pair<int, int> line_col(size_t at) {
    if (at < lc_pos_) {  // only error paths look back; recount from the start
      lc_pos_ = 0;
      lc_line_ = 1;
      lc_col_ = 0;
    }
    // Positions mostly move forward: count lines and columns incrementally.
    while (lc_pos_ < at && lc_pos_ < s_.size()) {
      unsigned char c = static_cast<unsigned char>(s_[lc_pos_]);
      if (c == '\n') {
        ++lc_line_;
        lc_col_ = 0;
      } else if ((c & 0xC0) != 0x80) {
        ++lc_col_;
      }
      ++lc_pos_;
    }
    return {lc_line_, lc_col_ + 1};
  }

  void push(Tok t, std::string text, size_t at) {
    auto [line, col] = line_col(at);
    Token tok;
    tok.type = t;
    tok.text = std::move(text);
    tok.line = line;
    tok.column = col;
    out_.push_back(std::move(tok));
  }

  // Skips whitespace as Python's \s matches it (Unicode), returning the new position.
  size_t skip_ws(size_t p) const {
    while (p < s_.size()) {
      size_t q = p;
      if (!py_isspace(utf8_next(s_, q))) break;
      p = q;
    }
    return p;
  }

  bool at(size_t p, std::string_view lit) const { return s_.compare(p, lit.size(), lit) == 0; }

  // Applies '-' (strip all whitespace) or lstrip_blocks to the data before a tag.
  void emit_data(std::string_view text, size_t start, char sign, bool is_variable) {
    std::string data(text);
    if (sign == '-') {
      data = py_strip(data, std::nullopt, false, true);
    } else if (sign != '+' && opt_.lstrip_blocks && !is_variable) {
      size_t nl = data.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool only_blank = data.find_first_not_of(" \t", l_pos) == std::string::npos;
        if (only_blank) data.resize(l_pos);
      }
    }
    if (!data.empty()) push(Tok::kData, std::move(data), start);
  }

  // Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` at p; returns the end or npos.
  size_t match_raw_begin(size_t p) const {
    size_t q = p + 2;
    if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) ++q;
    q = skip_ws(q);
    if (!at(q, "raw")) return std::string::npos;
    q = skip_ws(q + 3);
    if (at(q, "-%}")) return skip_ws(q + 3);
    if (at(q, "%}")) return q + 2;
    return std::string::npos;
  }

  void lex_root() {
    size_t start = pos_;
    size_t p = pos_;
    while (true) {
      p = s_.find('{', p);
      if (p == std::string::npos || p + 1 >= s_.size()) {
        push_data_tail(start);
        return;
      }
      char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++p;
    }
    char kind = s_[p + 1];
    char sign = (p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+')) ? s_[p + 2] : 0;
    std::string_view text(s_.data() + start, p - start);
    if (kind == '%') {
      size_t raw_end = match_raw_begin(p);
      if (raw_end != std::string::npos) {
        emit_data(text, start, sign, false);
        line_starting_ = s_[raw_end - 1] == '\n';
        lex_raw(raw_end);
        return;
      }
    }
    emit_data(text, start, sign, kind == '{');
    size_t after = p + 2 + (sign ? 1 : 0);
    line_starting_ = false;
    if (kind == '#') {
      lex_comment(p, after);
    } else {
      push(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", p);
      pos_ = after;
      lex_tag(kind == '{');
    }
  }

  void push_data_tail(size_t start) {
    if (start < s_.size()) push(Tok::kData, s_.substr(start), start);
    pos_ = s_.size();
  }

  void lex_comment(size_t begin, size_t p) {
    size_t end = s_.find("#}", p);
    if (end == std::string::npos) error("Missing end of comment tag", begin);
    char sign = (end > p && (s_[end - 1] == '-' || s_[end - 1] == '+')) ? s_[end - 1] : 0;
    size_t q = end + 2;
    if (sign == '-') {
      q = skip_ws(q);
    } else if (sign != '+' && opt_.trim_blocks && q < s_.size() && s_[q] == '\n') {
      ++q;
    }
    line_starting_ = s_[q - 1] == '\n';
    pos_ = q;
  }

  void lex_raw(size_t p) {
    // Find `{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)`.
    size_t search = p;
    while (true) {
      size_t b = s_.find("{%", search);
      if (b == std::string::npos) error("Missing end of raw directive", p);
      size_t q = b + 2;
      char sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
      q = skip_ws(q);
      if (!at(q, "endraw")) {
        search = b + 2;
        continue;
      }
      q = skip_ws(q + 6);
      size_t end;
      if (at(q, "+%}")) {
        end = q + 3;
      } else if (at(q, "-%}")) {
        end = skip_ws(q + 3);
      } else if (at(q, "%}")) {
        end = q + 2;
        if (opt_.trim_blocks && end < s_.size() && s_[end] == '\n') ++end;
      } else {
        search = b + 2;
        continue;
      }
      emit_data(std::string_view(s_).substr(p, b - p), p, sign, false);
      line_starting_ = s_[end - 1] == '\n';
      pos_ = end;
      return;
    }
  }

  // Tokens inside {{ }} or {% %} up to the matching end.
  void lex_tag(bool variable) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s_.size()) return;  // the parser reports the missing end
      size_t p = pos_;
      if (balance.empty()) {
        if (variable) {
          if (at(p, "-}}")) {
            push(Tok::kVarEnd, "", p);
            pos_ = skip_ws(p + 3);
            line_starting_ = s_[pos_ - 1] == '\n';
            return;
          }
          if (at(p, "}}")) {
            push(Tok::kVarEnd, "", p);
            pos_ = p + 2;
            line_starting_ = false;
            return;
          }
        } else {
          size_t end = std::string::npos;
          if (at(p, "+%}")) {
            end = p + 3;
          } else if (at(p, "-%}")) {
            end = skip_ws(p + 3);
          } else if (at(p, "%}")) {
            end = p + 2;
            if (opt_.trim_blocks && end < s_.size() && s_[end] == '\n') ++end;
          }
          if (end != std::string::npos) {
            push(Tok::kBlockEnd, "", p);
            pos_ = end;
            line_starting_ = s_[end - 1] == '\n';
            return;
          }
        }
      }
      size_t q = skip_ws(p);
      if (q != p) {
        line_starting_ = s_[q - 1] == '\n';
        pos_ = q;
        continue;
      }
      line_starting_ = false;
      unsigned char c = static_cast<unsigned char>(s_[p]);
      if (std::isdigit(c)) {
        lex_number(p);
      } else if (std::isalpha(c) || c == '_') {
        size_t e = p;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_'))
          ++e;
        push(Tok::kName, s_.substr(p, e - p), p);
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        lex_string(p);
      } else {
        lex_operator(p, balance);
      }
    }
  }

  // Digits with single underscores between them; returns the end or npos.
  size_t digits(size_t p) const {
    if (p >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[p])))
      return std::string::npos;
    while (true) {
      while (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) ++p;
      if (p + 1 < s_.size() && s_[p] == '_' &&
          std::isdigit(static_cast<unsigned char>(s_[p + 1]))) {
        ++p;
        continue;
      }
      return p;
    }
  }

  // jinja2's float rule first (not right after a '.'), then its integer rule:
  // 0b/0o/0x literals, [1-9](_?\d)* or 0(_?0)*; underscores separate digits.
  void lex_number(size_t p) {
    Token tok;
    auto [line, col] = line_col(p);
    tok.line = line;
    tok.column = col;
    if (p == 0 || s_[p - 1] != '.') {
      size_t e = digits(p), q = e;
      bool is_float = false;
      if (q < s_.size() && s_[q] == '.') {
        size_t f = digits(q + 1);
        if (f != std::string::npos) {
          q = f;
          is_float = true;
        }
      }
      if (q < s_.size() && (s_[q] == 'e' || s_[q] == 'E')) {
        size_t r = q + 1;
        if (r < s_.size() && (s_[r] == '+' || s_[r] == '-')) ++r;
        size_t x = digits(r);
        if (x != std::string::npos) {
          q = x;
          is_float = true;
        } else if (!is_float) {
          q = e;
        }
      }
      if (is_float) {
        std::string text;
        for (size_t i = p; i < q; ++i)
          if (s_[i] != '_') text.push_back(s_[i]);
        tok.type = Tok::kFloat;
        tok.text = s_.substr(p, q - p);
        tok.float_value = std::strtod(text.c_str(), nullptr);
        out_.push_back(std::move(tok));
        pos_ = q;
        return;
      }
    }
    auto is_digit_of = [](char c, int base) {
      if (base == 16) return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      return c >= '0' && c < static_cast<char>('0' + base);
    };
    // Digits of `base` with optional single underscores before each: (_?[digit])+
    auto run = [&](size_t q, int base, bool need_one) -> size_t {
      size_t start = q;
      while (true) {
        size_t r = q;
        if (r < s_.size() && s_[r] == '_') ++r;
        if (r < s_.size() && is_digit_of(s_[r], base)) {
          q = r + 1;
        } else {
          break;
        }
      }
      return (need_one && q == start) ? std::string::npos : q;
    };
    int base = 10;
    size_t body = p, e = std::string::npos;
    if (s_[p] == '0' && p + 1 < s_.size()) {
      char k = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[p + 1])));
      int b = k == 'b' ? 2 : k == 'o' ? 8 : k == 'x' ? 16 : 0;
      if (b) {
        e = run(p + 2, b, true);
        if (e != std::string::npos) {
          base = b;
          body = p + 2;
        }
      }
    }
    if (e == std::string::npos) {
      if (s_[p] == '0') {
        e = p + 1;
        while (true) {
          size_t r = e;
          if (r < s_.size() && s_[r] == '_') ++r;
          if (r < s_.size() && s_[r] == '0') {
            e = r + 1;
          } else {
            break;
          }
        }
      } else {
        e = run(p + 1, 10, false);
      }
    }
    unsigned __int128 v = 0;
    for (size_t i = body; i < e; ++i) {
      if (s_[i] == '_') continue;
      int d = std::isdigit(static_cast<unsigned char>(s_[i]))
                  ? s_[i] - '0'
                  : std::tolower(static_cast<unsigned char>(s_[i])) - 'a' + 10;
      v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
      if (v > static_cast<unsigned __int128>(INT64_MAX))
        error(fmt::format(
                  "integer literal '{}' is too large (integers beyond 64 bits are not supported)",
                  s_.substr(p, e - p)),
              p);
    }
    tok.type = Tok::kInt;
    tok.text = s_.substr(p, e - p);
    tok.int_value = static_cast<int64_t>(v);
    out_.push_back(std::move(tok));
    pos_ = e;
  }

  void lex_string(size_t p) {
    char quote = s_[p];
    size_t q = p + 1;
    std::string raw;
    while (true) {
      if (q >= s_.size()) error(fmt::format("unexpected char '{}' at {}", quote, p), p);
      char c = s_[q];
      if (c == quote) break;
      if (c == '\\') {
        if (q + 1 >= s_.size()) error(fmt::format("unexpected char '{}' at {}", quote, p), p);
        raw.push_back(c);
        raw.push_back(s_[q + 1]);
        q += 2;
        continue;
      }
      raw.push_back(c);
      ++q;
    }
    push(Tok::kString, unescape(raw, p), p);
    pos_ = q + 1;
  }

  // Python's "unicode-escape" decoding of the literal's body.
  std::string unescape(const std::string& raw, size_t at) {
    std::string out;
    out.reserve(raw.size());
    size_t i = 0;
    auto hex = [&](size_t start, int n, const char* what) -> char32_t {
      if (start + n > raw.size()) error(fmt::format("truncated {} escape", what), at);
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        char h = raw[start + k];
        int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                            : -1;
        if (d < 0) error(fmt::format("truncated {} escape", what), at);
        v = v * 16 + static_cast<char32_t>(d);
      }
      return v;
    };
    while (i < raw.size()) {
      char c = raw[i];
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      char e = raw[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          utf8_append(out, hex(i, 2, "\\xXX"));
          i += 2;
          break;
        case 'u':
          utf8_append(out, hex(i, 4, "\\uXXXX"));
          i += 4;
          break;
        case 'U': {
          char32_t v = hex(i, 8, "\\UXXXXXXXX");
          if (v > 0x10FFFF) error("illegal Unicode character", at);
          utf8_append(out, v);
          i += 8;
          break;
        }
        case 'N':
          error("\\N{...} escapes are not supported", at);
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < raw.size() && raw[i] >= '0' && raw[i] <= '7'; ++k)
              v = v * 8 + static_cast<char32_t>(raw[i++] - '0');
            utf8_append(out, v);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // A backslash before a non-ASCII character keeps the backslash and
            // turns the character into its escaped spelling, as Python does.
            size_t start = i - 1;
            size_t pos = start;
            char32_t cp = utf8_next(raw, pos);
            char buf[16];
            if (cp <= 0xFF) {
              std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
            } else if (cp <= 0xFFFF) {
              std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
            } else {
              std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
            }
            out.push_back('\\');
            out += buf + 1;
            i = pos;
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  void lex_operator(size_t p, std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : kTwo) {
      if (at(p, op)) {
        push(Tok::kOp, std::string(op), p);
        pos_ = p + 2;
        return;
      }
    }
    char c = s_[p];
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      size_t q = p;
      char32_t cp = utf8_next(s_, q);
      std::string ch;
      utf8_append(ch, cp);
      error(fmt::format("unexpected char '{}' at {}", ch, p), p);
    }
    if (c == '{' || c == '(' || c == '[') {
      balance.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
    } else if (c == '}' || c == ')' || c == ']') {
      if (balance.empty()) error(fmt::format("unexpected '{}'", c), p);
      char expected = balance.back();
      balance.pop_back();
      if (expected != c) error(fmt::format("unexpected '{}', expected '{}'", c, expected), p);
    }
    push(Tok::kOp, std::string(1, c), p);
    pos_ = p + 1;
  }

  std::string s_;
  LexerOptions opt_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
  size_t lc_pos_ = 0;
  int lc_line_ = 1, lc_col_ = 0;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  if (!utf8_valid(source)) throw TemplateError{"template is not valid UTF-8", 1, 1};
  return Lexer(normalize(source, options.keep_trailing_newline), options).run();
}

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::kData:
      return "template data / text";
    case Tok::kVarBegin:
      return "begin of print statement";
    case Tok::kVarEnd:
      return "end of print statement";
    case Tok::kBlockBegin:
      return "begin of statement block";
    case Tok::kBlockEnd:
      return "end of statement block";
    case Tok::kName:
      return t.text;
    case Tok::kString:
      return "string";
    case Tok::kInt:
      return "integer";
    case Tok::kFloat:
      return "float";
    case Tok::kOp:
      return t.text;
    case Tok::kEof:
      return "end of template";
  }
  return "token";
}

}  // namespace tachyon::jinja
