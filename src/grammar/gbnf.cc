#include <cctype>
#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/parsers.h"

namespace tachyon::grammar {
namespace {

using Kind = GrammarNode::Kind;

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(std::string_view s, const GrammarLimits& limits) : s_(s), limits_(limits) {}

  std::vector<RuleDefinition> parse() {
    if (s_.size() > limits_.max_text_bytes)
      raise<InvalidArgument>("the grammar is longer than {} bytes", limits_.max_text_bytes);
    if (!utf8::is_valid(s_)) raise<InvalidArgument>("the grammar is not valid UTF-8");
    std::vector<RuleDefinition> rules;
    skip_space();
    while (pos_ < s_.size()) {
      if (rules.size() >= limits_.max_rules)
        fail(fmt::format("more than {} rules", limits_.max_rules));
      RuleDefinition r;
      r.name = name();
      skip_space();
      if (s_.compare(pos_, 3, "::=") != 0) fail(fmt::format("expected '::=' after '{}'", r.name));
      pos_ += 3;
      r.body = alternation(0);
      if (pos_ < s_.size() && !at_rule_start()) fail(fmt::format("unexpected '{}'", s_[pos_]));
      rules.push_back(std::move(r));
      skip_space();
    }
    if (rules.empty()) raise<InvalidArgument>("the grammar has no rules");
    return rules;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    raise<InvalidArgument>("{} at offset {}", what, pos_);
  }
  void skip_space() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }
  std::string name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }
  // Whether a new rule (`name ::=`) starts at pos_.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.compare(p, 3, "::=") == 0;
  }
  bool sequence_ends(int depth) {
    skip_space();
    if (pos_ >= s_.size()) return true;
    const char c = s_[pos_];
    if (c == '|' || c == ')') return true;
    return depth == 0 && at_rule_start();
  }
  GrammarNode alternation(int depth) {
    if (depth > limits_.max_nesting) fail("groups nested too deeply");
    GrammarNode alt;
    alt.kind = Kind::kAlternation;
    alt.children.push_back(sequence(depth));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alt.children.push_back(sequence(depth));
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }
  GrammarNode sequence(int depth) {
    GrammarNode seq;
    seq.kind = Kind::kSequence;
    while (!sequence_ends(depth)) seq.children.push_back(postfix(primary(depth)));
    return seq;
  }
  int32_t number() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = std::min<int64_t>(v * 10 + (s_[pos_] - '0'), int64_t{1} << 30);
      ++pos_;
    }
    if (pos_ == start) fail("expected a number");
    if (v > limits_.max_repeat)
      fail(fmt::format("a repetition count above {}", limits_.max_repeat));
    return static_cast<int32_t>(v);
  }
  GrammarNode postfix(GrammarNode a) {
    while (pos_ < s_.size()) {
      int32_t lo = 0, hi = -1;
      const char c = s_[pos_];
      if (c == '?') {
        hi = 1;
        ++pos_;
      } else if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        lo = 1;
        ++pos_;
      } else if (c == '{') {
        ++pos_;
        skip_space();
        lo = hi = number();
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          skip_space();
          hi = (pos_ < s_.size() && s_[pos_] == '}') ? -1 : number();
          skip_space();
        }
        if (pos_ >= s_.size() || s_[pos_] != '}') fail("an unterminated {m,n}");
        ++pos_;
        if (hi >= 0 && hi < lo) fail("a repetition {m,n} with n < m");
      } else {
        break;
      }
      GrammarNode r;
      r.kind = Kind::kRepeat;
      r.min = lo;
      r.max = hi;
      r.children.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }
  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
        fail("a bad hex escape");
      const char h = s_[pos_++];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }
  // One character of a literal or class, escapes decoded.
  char32_t character() {
    if (pos_ >= s_.size()) fail("an unterminated literal or class");
    if (s_[pos_] != '\\') {
      size_t len = 0;
      const char32_t c = utf8::decode(s_, pos_, len);
      pos_ += len;
      return c;
    }
    if (++pos_ >= s_.size()) fail("a trailing backslash");
    const char c = s_[pos_++];
    switch (c) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
      case '\'':
        return static_cast<unsigned char>(c);
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U': {
        const uint32_t v = hex(8);
        if (v > kMaxCodePoint) fail("a code point above U+10FFFF");
        return v;
      }
      default:
        fail(fmt::format("an unknown escape '\\{}'", c));
    }
  }
  GrammarNode primary(int depth) {
    const char c = s_[pos_];
    GrammarNode n;
    if (c == '"') {
      ++pos_;
      n.kind = Kind::kLiteral;
      while (true) {
        if (pos_ >= s_.size()) fail("an unterminated literal");
        if (s_[pos_] == '"') break;
        utf8::append(n.text, character());
      }
      ++pos_;
      return n;
    }
    if (c == '[') {
      ++pos_;
      bool negate = false;
      if (pos_ < s_.size() && s_[pos_] == '^') {
        negate = true;
        ++pos_;
      }
      CodePointRanges r;
      while (true) {
        if (pos_ >= s_.size()) fail("an unterminated class");
        if (s_[pos_] == ']') break;
        const char32_t lo = character();
        char32_t hi = lo;
        if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
          ++pos_;
          hi = character();
          if (hi < lo) fail("a character range out of order");
        }
        r.emplace_back(lo, hi);
      }
      ++pos_;
      n.kind = Kind::kClass;
      n.ranges = normalize_ranges(negate ? complement_ranges(r) : std::move(r));
      return n;
    }
    if (c == '.') {
      ++pos_;
      n.kind = Kind::kClass;
      n.ranges = {{0, kMaxCodePoint}};
      return n;
    }
    if (c == '(') {
      ++pos_;
      n = alternation(depth + 1);
      if (pos_ >= s_.size() || s_[pos_] != ')') fail("an unterminated group");
      ++pos_;
      return n;
    }
    if (is_name_char(c)) {
      n.kind = Kind::kRef;
      n.text = name();
      return n;
    }
    fail(fmt::format("unexpected '{}'", c));
  }

  std::string_view s_;
  const GrammarLimits& limits_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<RuleDefinition> parse_gbnf(std::string_view text, const GrammarLimits& limits) {
  return GbnfParser(text, limits).parse();
}

}  // namespace tachyon::grammar
