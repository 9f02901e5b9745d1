#include "grammar/schema_values.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/parsers.h"

namespace tachyon::grammar::schema {

using Kind = GrammarNode::Kind;

GrammarNode literal(std::string text) {
  GrammarNode n;
  n.kind = Kind::kLiteral;
  n.text = std::move(text);
  return n;
}
GrammarNode char_class(CodePointRanges ranges) {
  GrammarNode n;
  n.kind = Kind::kClass;
  n.ranges = normalize_ranges(std::move(ranges));
  return n;
}
GrammarNode rule_ref(std::string name) {
  GrammarNode n;
  n.kind = Kind::kRef;
  n.text = std::move(name);
  return n;
}
GrammarNode sequence(std::vector<GrammarNode> children) {
  GrammarNode n;
  n.kind = Kind::kSequence;
  n.children = std::move(children);
  return n;
}
GrammarNode alternation(std::vector<GrammarNode> children) {
  if (children.size() == 1) return std::move(children[0]);
  GrammarNode n;
  n.kind = Kind::kAlternation;
  n.children = std::move(children);
  return n;
}
GrammarNode repeat(GrammarNode unit, int32_t min, int32_t max) {
  GrammarNode n;
  n.kind = Kind::kRepeat;
  n.min = min;
  n.max = max;
  n.children.push_back(std::move(unit));
  return n;
}

namespace {

GrammarNode digits(char lo, char hi) {
  return char_class({{char32_t(lo), char32_t(hi)}});
}

bool all_of(std::string_view s, char c) {
  return s.find_first_not_of(c) == std::string_view::npos;
}

// The decimal strings of one length between a and b (a <= b, same length): disjoint
// alternatives by the first digit where they differ.
GrammarNode same_length(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  if (n == 0) return sequence({});
  if (all_of(a, '0') && all_of(b, '9')) return repeat(digits('0', '9'), int32_t(n), int32_t(n));
  if (a[0] == b[0])
    return sequence({literal(std::string(1, a[0])), same_length(a.substr(1), b.substr(1))});
  if (n == 1) return digits(a[0], b[0]);
  const std::string nines(n - 1, '9'), zeros(n - 1, '0');
  std::vector<GrammarNode> alts;
  alts.push_back(sequence({literal(std::string(1, a[0])), same_length(a.substr(1), nines)}));
  if (a[0] + 1 <= b[0] - 1)
    alts.push_back(sequence({digits(char(a[0] + 1), char(b[0] - 1)),
                             repeat(digits('0', '9'), int32_t(n - 1), int32_t(n - 1))}));
  alts.push_back(sequence({literal(std::string(1, b[0])), same_length(zeros, b.substr(1))}));
  return alternation(std::move(alts));
}

// Non-negative integers in [lo, hi] (hi absent: unbounded) without leading zeros.
GrammarNode magnitude_range(uint64_t lo, std::optional<uint64_t> hi) {
  const std::string a = std::to_string(lo);
  const std::string b = hi ? std::to_string(*hi) : std::string();
  const size_t last = hi ? b.size() : a.size();
  std::vector<GrammarNode> alts;
  for (size_t len = a.size(); len <= last; ++len) {
    const std::string from = len == a.size() ? a : "1" + std::string(len - 1, '0');
    const std::string to = hi && len == b.size() ? b : std::string(len, '9');
    alts.push_back(same_length(from, to));
  }
  if (!hi)  // longer than lo: any
    alts.push_back(sequence({digits('1', '9'), repeat(digits('0', '9'), int32_t(a.size()), -1)}));
  return alternation(std::move(alts));
}

uint64_t magnitude(int64_t v) {  // |v|, also for INT64_MIN
  return v < 0 ? uint64_t(-(v + 1)) + 1 : uint64_t(v);
}

std::optional<int64_t> integer_part(std::optional<double> v) {
  if (!v) return std::nullopt;
  if (!(std::fabs(*v) <= 9e18)) raise<InvalidArgument>("a bound beyond +-9e18");
  return static_cast<int64_t>(std::floor(*v));
}

GrammarNode fraction() {
  return repeat(sequence({literal("."), repeat(digits('0', '9'), 1, -1)}), 0, 1);
}

}  // namespace

GrammarNode integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<GrammarNode> alts;
  if (!hi || *hi >= 0)
    alts.push_back(magnitude_range(lo && *lo > 0 ? uint64_t(*lo) : 0,
                                   hi ? std::optional<uint64_t>(uint64_t(*hi)) : std::nullopt));
  if (!lo || *lo < 0) {
    const uint64_t from = hi && *hi < 0 ? magnitude(*hi) : 1;
    const std::optional<uint64_t> to = lo ? std::optional<uint64_t>(magnitude(*lo)) : std::nullopt;
    alts.push_back(sequence({literal("-"), magnitude_range(from, to)}));
  }
  return alternation(std::move(alts));
}

namespace {

bool is_integral(double v) {
  return std::floor(v) == v;
}

// Non-negative numbers (as written after the sign) between bounds on their magnitude:
// above `lo` (or at it), below `hi` (or at it). An integer part p with any fraction covers
// [p, p + 1): exact where the bounds are integers, the integer part only otherwise.
GrammarNode magnitude_number(double lo, bool lo_ex, std::optional<double> hi, bool hi_ex) {
  const int64_t ilo = *integer_part(lo);
  const std::optional<int64_t> ihi = integer_part(hi);
  const int64_t a = is_integral(lo) && lo_ex ? ilo + 1 : ilo;  // any fraction from here
  const std::optional<int64_t> b =
      hi && is_integral(*hi) ? std::optional<int64_t>(*ihi - 1) : ihi;  // to here
  const GrammarNode digit = char_class({{'0', '9'}});
  std::vector<GrammarNode> alts;
  if (!b || a <= *b) alts.push_back(sequence({integer_range(a, b), fraction()}));
  if (hi && is_integral(*hi) && !hi_ex && *ihi >= a)  // hi itself: no fraction but zeros
    alts.push_back(sequence({literal(std::to_string(*ihi)),
                             repeat(sequence({literal("."), repeat(literal("0"), 1, -1)}), 0, 1)}));
  if (is_integral(lo) && lo_ex && (!hi || *hi > lo))  // just above lo: a non-zero fraction
    alts.push_back(
        sequence({literal(std::to_string(ilo)), literal("."), repeat(literal("0"), 0, -1),
                  char_class({{'1', '9'}}), repeat(digit, 0, -1)}));
  if (alts.empty()) raise<InvalidArgument>("no number lies between the bounds");
  return alternation(std::move(alts));
}

}  // namespace

GrammarNode number_range(std::optional<double> lo, bool lo_exclusive, std::optional<double> hi,
                         bool hi_exclusive) {
  std::vector<GrammarNode> alts;
  if (!hi || *hi > 0 || (*hi == 0 && !hi_exclusive)) {  // x >= 0
    const bool positive_lo = lo && *lo > 0;
    alts.push_back(
        magnitude_number(positive_lo ? *lo : 0.0, positive_lo && lo_exclusive, hi, hi_exclusive));
  }
  if (!lo || *lo < 0) {  // x < 0: -m with m above max(-hi, 0) (0 excluded), up to -lo
    const bool negative_hi = hi && *hi < 0;
    alts.push_back(sequence(
        {literal("-"),
         magnitude_number(negative_hi ? -*hi : 0.0, negative_hi ? hi_exclusive : true,
                          lo ? std::optional<double>(-*lo) : std::nullopt, lo_exclusive)}));
  }
  if (alts.empty()) raise<InvalidArgument>("no number lies between the bounds");
  return alternation(std::move(alts));
}

namespace {

bool needs_escape(char32_t c) {
  return c < 0x20 || c == '"' || c == '\\';
}

std::string escaped(char32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      return fmt::format("\\u{:04x}", uint32_t(c));
  }
}

}  // namespace

GrammarNode json_escaped(GrammarNode n) {
  switch (n.kind) {
    case Kind::kLiteral: {
      std::string out;
      for (char c : n.text) {
        if (needs_escape(static_cast<unsigned char>(c)))
          out += escaped(static_cast<unsigned char>(c));
        else
          out += c;
      }
      n.text = std::move(out);
      return n;
    }
    case Kind::kClass: {
      CodePointRanges safe;
      std::vector<GrammarNode> alts;
      for (const auto& [lo, hi] : n.ranges) {
        for (char32_t c = lo; c <= hi && c < 0x60; ++c)
          if (needs_escape(c)) alts.push_back(literal(escaped(c)));
        // The range without the characters that need escaping.
        char32_t from = lo;
        for (char32_t c = lo; c <= hi && c < 0x60; ++c) {
          if (needs_escape(c)) {
            if (c > from) safe.emplace_back(from, c - 1);
            from = c + 1;
          }
        }
        if (from <= hi) safe.emplace_back(from, hi);
      }
      if (alts.empty()) return n;
      if (!safe.empty()) alts.insert(alts.begin(), char_class(std::move(safe)));
      return alternation(std::move(alts));
    }
    default:
      for (GrammarNode& c : n.children) c = json_escaped(std::move(c));
      return n;
  }
}

GrammarNode string_pattern(std::string_view regex, const GrammarLimits& limits) {
  std::string_view r = regex;
  // JSON Schema's patterns are ECMAScript regexes, often written anchored.
  if (!r.empty() && r.front() == '^') r.remove_prefix(1);
  if (!r.empty() && r.back() == '$' && (r.size() < 2 || r[r.size() - 2] != '\\'))
    r.remove_suffix(1);
  return sequence({literal("\""), json_escaped(parse_regex(r, limits)), literal("\"")});
}

GrammarNode string_format(std::string_view format, const GrammarLimits& limits) {
  static const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  static const std::string time =
      R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string label = R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  static const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  std::string re;
  if (format == "date") {
    re = date;
  } else if (format == "time") {
    re = time;
  } else if (format == "date-time") {
    re = date + "[Tt]" + time;
  } else if (format == "duration") {
    re = R"(P(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(\d+H)?(\d+M)?(\d+S)?)?)";
  } else if (format == "uuid") {
    re = R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})";
  } else if (format == "email") {
    re = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)" + label +
         R"((\.)" + label + ")+";
  } else if (format == "uri") {  // a scheme, then URI characters and %HH escapes
    re = R"([A-Za-z][A-Za-z0-9+.\-]*:([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+)";
  } else if (format == "hostname") {
    re = label + R"((\.)" + label + ")*";
  } else if (format == "ipv4") {
    re = octet + R"((\.)" + octet + "){3}";
  } else {
    raise<InvalidArgument>("the format '{}' is not supported", format);
  }
  return string_pattern(re, limits);
}

namespace {

// An encoded string's units: an escape sequence or one character.
std::vector<std::string> units(std::string_view enc) {
  std::vector<std::string> out;
  for (size_t i = 0; i < enc.size();) {
    size_t len = 1;
    if (enc[i] == '\\')
      len = i + 1 < enc.size() && enc[i + 1] == 'u' ? 6 : 2;
    else if ((enc[i] & 0xE0) == 0xC0)
      len = 2;
    else if ((enc[i] & 0xF0) == 0xE0)
      len = 3;
    else if ((enc[i] & 0xF8) == 0xF0)
      len = 4;
    out.emplace_back(enc.substr(i, len));
    i += len;
  }
  return out;
}

struct TrieNode {
  std::map<std::string, size_t> children;
  bool terminal = false;
};

GrammarNode except_body(const std::vector<TrieNode>& trie, size_t n) {
  const TrieNode& node = trie[n];
  std::vector<GrammarNode> alts;
  CodePointRanges excluded{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  std::string escapes = "\"\\/bfnrt";
  for (const auto& [unit, child] : node.children) {
    alts.push_back(sequence({literal(unit), except_body(trie, child)}));
    if (unit.size() == 2 && unit[0] == '\\') {
      escapes.erase(std::remove(escapes.begin(), escapes.end(), unit[1]), escapes.end());
    } else if (unit[0] != '\\') {
      size_t len = 0;
      const char32_t c = utf8::decode(unit, 0, len);
      excluded.emplace_back(c, c);
    }
  }
  if (!node.terminal) alts.push_back(literal("\""));
  // A first unit unlike every child's, then anything.
  std::vector<GrammarNode> other{char_class(complement_ranges(normalize_ranges(excluded)))};
  CodePointRanges esc;
  for (char c : escapes) esc.emplace_back(char32_t(c), char32_t(c));
  if (!esc.empty()) other.push_back(sequence({literal("\\"), char_class(std::move(esc))}));
  other.push_back(
      sequence({literal("\\u"), repeat(char_class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}), 4, 4)}));
  alts.push_back(
      sequence({alternation(std::move(other)), repeat(rule_ref("char"), 0, -1), literal("\"")}));
  return alternation(std::move(alts));
}

}  // namespace

GrammarNode string_except(const std::vector<std::string>& encoded) {
  std::vector<TrieNode> trie(1);
  for (const std::string& e : encoded) {
    size_t n = 0;
    for (const std::string& u : units(e)) {
      auto it = trie[n].children.find(u);
      if (it == trie[n].children.end()) {
        trie.emplace_back();
        it = trie[n].children.emplace(u, trie.size() - 1).first;
      }
      n = it->second;
    }
    trie[n].terminal = true;
  }
  return sequence({literal("\""), except_body(trie, 0)});
}

}  // namespace tachyon::grammar::schema
