#include <cctype>
#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/parsers.h"

namespace tachyon::grammar {
namespace {

using Kind = GrammarNode::Kind;

GrammarNode class_node(CodePointRanges r) {
  GrammarNode n;
  n.kind = Kind::kClass;
  n.ranges = normalize_ranges(std::move(r));
  return n;
}

const CodePointRanges& digit_ranges() {
  static const CodePointRanges r{{'0', '9'}};
  return r;
}
const CodePointRanges& word_ranges() {
  static const CodePointRanges r{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
const CodePointRanges& space_ranges() {  // ECMAScript's WhiteSpace and LineTerminator
  static const CodePointRanges r = normalize_ranges({{'\t', '\r'},
                                                     {' ', ' '},
                                                     {0xA0, 0xA0},
                                                     {0x1680, 0x1680},
                                                     {0x2000, 0x200A},
                                                     {0x2028, 0x2029},
                                                     {0x202F, 0x202F},
                                                     {0x205F, 0x205F},
                                                     {0x3000, 0x3000},
                                                     {0xFEFF, 0xFEFF}});
  return r;
}

class RegexParser {
 public:
  RegexParser(std::string_view s, const GrammarLimits& limits) : s_(s), limits_(limits) {}

  GrammarNode parse() {
    if (s_.size() > limits_.max_text_bytes)
      raise<InvalidArgument>("the regex is longer than {} bytes", limits_.max_text_bytes);
    if (!utf8::is_valid(s_)) raise<InvalidArgument>("the regex is not valid UTF-8");
    if (!s_.empty() && s_[0] == '^') pos_ = 1;
    end_ = s_.size();
    if (end_ > pos_ && s_[end_ - 1] == '$' && !escaped_at(end_ - 1)) --end_;
    GrammarNode n = alternation(0);
    if (pos_ < end_) fail("an unmatched ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    raise<InvalidArgument>("{} at offset {}", what, pos_);
  }
  // Whether the byte at i is preceded by an odd number of backslashes.
  bool escaped_at(size_t i) const {
    size_t k = 0;
    while (i > k && s_[i - k - 1] == '\\') ++k;
    return k % 2 == 1;
  }
  bool more() const { return pos_ < end_; }
  char peek() const { return s_[pos_]; }
  char32_t next_code_point() {
    size_t len = 0;
    const char32_t c = utf8::decode(s_, pos_, len);
    pos_ += len;
    return c;
  }

  GrammarNode alternation(int depth) {
    if (depth > limits_.max_nesting) fail("groups nested too deeply");
    GrammarNode alt;
    alt.kind = Kind::kAlternation;
    alt.children.push_back(sequence(depth));
    while (more() && peek() == '|') {
      ++pos_;
      alt.children.push_back(sequence(depth));
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }
  GrammarNode sequence(int depth) {
    GrammarNode seq;
    seq.kind = Kind::kSequence;
    while (more() && peek() != '|' && peek() != ')') {
      GrammarNode atom_node = atom(depth);
      seq.children.push_back(quantified(std::move(atom_node)));
    }
    return seq;
  }
  // Parses {m}, {m,} or {m,n} at pos_; false (pos_ unchanged) when it is not one.
  bool braces(int32_t& lo, int32_t& hi) {
    size_t p = pos_ + 1;
    auto number = [&](int32_t& out) {
      const size_t start = p;
      int64_t v = 0;
      while (p < end_ && s_[p] >= '0' && s_[p] <= '9') {
        v = std::min<int64_t>(v * 10 + (s_[p] - '0'), int64_t{1} << 30);
        ++p;
      }
      out = static_cast<int32_t>(v);
      return p > start;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (p < end_ && s_[p] == ',') {
      ++p;
      if (!number(hi)) hi = -1;
    }
    if (p >= end_ || s_[p] != '}') return false;
    pos_ = p + 1;
    return true;
  }
  GrammarNode quantified(GrammarNode a) {
    while (more()) {
      int32_t lo = 0, hi = -1;
      const char c = peek();
      if (c == '?') {
        hi = 1;
        ++pos_;
      } else if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        lo = 1;
        ++pos_;
      } else if (c == '{' && braces(lo, hi)) {
        if (lo > limits_.max_repeat || hi > limits_.max_repeat)
          fail(fmt::format("a repetition count above {}", limits_.max_repeat));
        if (hi >= 0 && hi < lo) fail("a repetition {m,n} with n < m");
      } else {
        break;
      }
      if (more() && peek() == '?') ++pos_;  // lazy: the same texts
      GrammarNode r;
      r.kind = Kind::kRepeat;
      r.min = lo;
      r.max = hi;
      r.children.push_back(std::move(a));
      a = std::move(r);
      if (more() && (peek() == '*' || peek() == '+' || peek() == '?'))
        fail("a quantifier follows another");
    }
    return a;
  }
  GrammarNode literal(char32_t c) {
    GrammarNode n;
    n.kind = Kind::kLiteral;
    n.text = utf8::encode(c);
    return n;
  }
  GrammarNode atom(int depth) {
    const char c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (more() && peek() == '?') {
          if (pos_ + 1 < end_ && s_[pos_ + 1] == ':') {
            pos_ += 2;
          } else if (pos_ + 1 < end_ && s_[pos_ + 1] == '<' && pos_ + 2 < end_ &&
                     s_[pos_ + 2] != '=' && s_[pos_ + 2] != '!') {
            const size_t close = s_.find('>', pos_);
            if (close == std::string_view::npos || close >= end_)
              fail("an unterminated group name");
            pos_ = close + 1;
          } else if (pos_ + 1 < end_ &&
                     (s_[pos_ + 1] == '=' || s_[pos_ + 1] == '!' || s_[pos_ + 1] == '<')) {
            fail("lookaround is not supported");
          } else {
            fail("an unknown group kind '(?'");
          }
        }
        GrammarNode inner = alternation(depth + 1);
        if (!more() || peek() != ')') fail("an unterminated group");
        ++pos_;
        return inner;
      }
      case '[':
        return char_class(depth);
      case '.':
        ++pos_;
        return class_node(complement_ranges({{'\n', '\n'}, {'\r', '\r'}}));
      case '\\':
        return escape_atom();
      case '*':
      case '+':
      case '?':
        fail("a quantifier with nothing to repeat");
      case '^':
      case '$':
        fail("anchors are only supported at the ends of the regex");
      default:
        return literal(next_code_point());
    }
  }
  // An escape outside a class: a class (\d ...) or one code point.
  GrammarNode escape_atom() {
    ++pos_;
    if (!more()) fail("a trailing backslash");
    const char c = peek();
    if (c == 'b' || c == 'B') fail("word boundaries are not supported");
    if ((c >= '1' && c <= '9') || c == 'k') fail("backreferences are not supported");
    CodePointRanges r;
    if (class_escape(r)) return class_node(std::move(r));
    return literal(escape_code_point());
  }
  // \d \D \w \W \s \S at pos_ (after the backslash): consumes it and fills r.
  bool class_escape(CodePointRanges& r) {
    const char c = peek();
    const CodePointRanges* base = nullptr;
    if (c == 'd' || c == 'D') base = &digit_ranges();
    if (c == 'w' || c == 'W') base = &word_ranges();
    if (c == 's' || c == 'S') base = &space_ranges();
    if (!base) return false;
    ++pos_;
    r = (c >= 'a') ? *base : complement_ranges(*base);
    return true;
  }
  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (!more() || !std::isxdigit(static_cast<unsigned char>(peek()))) fail("a bad hex escape");
      const char h = peek();
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++pos_;
    }
    return v;
  }
  // The code point of an escape at pos_ (after the backslash).
  char32_t escape_code_point() {
    const char c = peek();
    switch (c) {
      case 'n':
        ++pos_;
        return '\n';
      case 'r':
        ++pos_;
        return '\r';
      case 't':
        ++pos_;
        return '\t';
      case 'f':
        ++pos_;
        return '\f';
      case 'v':
        ++pos_;
        return '\v';
      case '0':
        ++pos_;
        return 0;
      case 'x':
        ++pos_;
        return hex(2);
      case 'u': {
        ++pos_;
        if (more() && peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          size_t n = 0;
          while (more() && peek() != '}') {
            if (++n > 6) fail("a bad \\u{...} escape");
            v = v * 16 + hex(1);
          }
          if (!more() || n == 0) fail("a bad \\u{...} escape");
          ++pos_;
          if (v > kMaxCodePoint) fail("a code point above U+10FFFF");
          return v;
        }
        return hex(4);
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(c)))
          fail(fmt::format("an unknown escape '\\{}'", c));
        return next_code_point();  // an escaped symbol stands for itself
    }
  }
  GrammarNode char_class(int depth) {
    if (depth > limits_.max_nesting) fail("groups nested too deeply");
    ++pos_;
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodePointRanges r;
    while (true) {  // [] and [^] are the empty class and any character
      if (!more()) fail("an unterminated character class");
      if (peek() == ']') break;
      char32_t lo;
      if (peek() == '\\') {
        ++pos_;
        if (!more()) fail("a trailing backslash");
        CodePointRanges esc;
        if (class_escape(esc)) {
          r.insert(r.end(), esc.begin(), esc.end());
          continue;
        }
        lo = peek() == 'b' ? (++pos_, char32_t{8}) : escape_code_point();
      } else {
        lo = next_code_point();
      }
      char32_t hi = lo;
      if (pos_ + 1 < end_ && peek() == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          if (!more()) fail("a trailing backslash");
          CodePointRanges esc;
          if (class_escape(esc)) fail("a class escape as a range's end");
          hi = escape_code_point();
        } else {
          hi = next_code_point();
        }
        if (hi < lo) fail("a character range out of order");
      }
      r.emplace_back(lo, hi);
    }
    ++pos_;
    return class_node(negate ? complement_ranges(r) : std::move(r));
  }

  std::string_view s_;
  const GrammarLimits& limits_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

GrammarNode parse_regex(std::string_view pattern, const GrammarLimits& limits) {
  return RegexParser(pattern, limits).parse();
}

}  // namespace tachyon::grammar
