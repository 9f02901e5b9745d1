#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"

namespace tachyon::grammar {

CodePointRanges normalize_ranges(CodePointRanges r) {
  std::sort(r.begin(), r.end());
  CodePointRanges out;
  for (const auto& [lo, hi] : r) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

CodePointRanges complement_ranges(const CodePointRanges& r) {
  CodePointRanges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : normalize_ranges(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

namespace {

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

int utf8_len(char32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

ByteRanges encode_pair(char32_t lo, char32_t hi, int n) {
  ByteRanges out(static_cast<size_t>(n));
  static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1, shift = 0; i >= 0; --i, shift += 6) {
    const uint32_t mask = i == 0 ? (n == 1 ? 0x7F : (0xFFu >> (n + 1))) : 0x3F;
    const uint8_t prefix = i == 0 ? kLead[n] : 0x80;
    out[static_cast<size_t>(i)] = {static_cast<uint8_t>(prefix | ((lo >> shift) & mask)),
                                   static_cast<uint8_t>(prefix | ((hi >> shift) & mask))};
  }
  return out;
}

void split_range(char32_t lo, char32_t hi, std::vector<ByteRanges>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates encode nothing
    if (lo < 0xD800) split_range(lo, 0xD7FF, out);
    if (hi > 0xDFFF) split_range(0xE000, hi, out);
    return;
  }
  for (char32_t b : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (lo <= b && hi > b) {
      split_range(lo, b, out);
      split_range(b + 1, hi, out);
      return;
    }
  }
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_range(lo, lo | m, out);
        split_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_range(lo, (hi & ~m) - 1, out);
        split_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  out.push_back(encode_pair(lo, hi, n));
}

class Lowering {
 public:
  Lowering(const GrammarLimits& limits) : limits_(limits) {}

  Grammar run(const std::vector<RuleDefinition>& defs, const std::string& root) {
    for (const RuleDefinition& d : defs) {
      if (!names_.emplace(d.name, static_cast<uint32_t>(g_.rules.size())).second)
        raise<InvalidArgument>("rule '{}' is defined twice", d.name);
      new_rule(d.name);
    }
    auto it = names_.find(root);
    if (it == names_.end()) raise<InvalidArgument>("the grammar has no '{}' rule", root);
    g_.root = it->second;
    for (size_t i = 0; i < defs.size(); ++i) define(static_cast<uint32_t>(i), defs[i].body);
    check_left_recursion();
    check_productive();
    return std::move(g_);
  }

 private:
  using Seq = std::vector<Grammar::Element>;

  uint32_t new_rule(std::string name) {
    if (g_.rules.size() >= limits_.max_rules)
      raise<InvalidArgument>("the grammar expands to more than {} rules", limits_.max_rules);
    g_.rules.emplace_back();
    g_.rule_names.push_back(std::move(name));
    return static_cast<uint32_t>(g_.rules.size() - 1);
  }
  void add_alternative(uint32_t rule, const Seq& seq) {
    if (g_.elements.size() + seq.size() + 1 > limits_.max_elements)
      raise<InvalidArgument>("the grammar expands to more than {} elements", limits_.max_elements);
    g_.rules[rule].push_back(static_cast<uint32_t>(g_.elements.size()));
    g_.elements.insert(g_.elements.end(), seq.begin(), seq.end());
    g_.elements.push_back({Grammar::Element::kEnd, 0});
  }
  void grow(Seq& seq, size_t more) {
    if (seq.size() + more > limits_.max_elements)
      raise<InvalidArgument>("the grammar expands to more than {} elements", limits_.max_elements);
  }
  Grammar::Element bytes(const std::bitset<256>& set) {
    const std::string key = set.to_string();
    auto [it, fresh] = byte_set_index_.emplace(key, static_cast<uint32_t>(g_.byte_sets.size()));
    if (fresh) g_.byte_sets.push_back(set);
    return {Grammar::Element::kBytes, it->second};
  }
  static Grammar::Element ref(uint32_t rule) { return {Grammar::Element::kRef, rule}; }

  void define(uint32_t rule, const GrammarNode& body) {
    if (body.kind == GrammarNode::Kind::kAlternation) {
      for (const GrammarNode& c : body.children) add_alternative(rule, sequence(c));
    } else {
      add_alternative(rule, sequence(body));
    }
  }
  Seq sequence(const GrammarNode& n) {
    Seq seq;
    append(n, seq);
    return seq;
  }
  // A helper rule holding n (or the single element n lowers to).
  Seq as_unit(const GrammarNode& n) {
    Seq s = sequence(n);
    if (s.size() == 1) return s;
    const uint32_t r = new_rule(fmt::format("({})", g_.rules.size()));
    define(r, n);
    return {ref(r)};
  }
  void append(const GrammarNode& n, Seq& seq) {
    switch (n.kind) {
      case GrammarNode::Kind::kSequence:
        for (const GrammarNode& c : n.children) append(c, seq);
        return;
      case GrammarNode::Kind::kAlternation: {
        if (n.children.size() == 1) return append(n.children[0], seq);
        const uint32_t r = new_rule(fmt::format("({})", g_.rules.size()));
        define(r, n);
        seq.push_back(ref(r));
        return;
      }
      case GrammarNode::Kind::kLiteral:
        grow(seq, n.text.size());
        for (unsigned char c : n.text) {
          std::bitset<256> s;
          s.set(c);
          seq.push_back(bytes(s));
        }
        return;
      case GrammarNode::Kind::kClass:
        seq.push_back(code_point_class(n.ranges));
        return;
      case GrammarNode::Kind::kRef: {
        auto it = names_.find(n.text);
        if (it == names_.end()) raise<InvalidArgument>("rule '{}' is not defined", n.text);
        seq.push_back(ref(it->second));
        return;
      }
      case GrammarNode::Kind::kRepeat:
        return repeat(n, seq);
    }
  }
  void repeat(const GrammarNode& n, Seq& seq) {
    if (n.min < 0 || n.min > limits_.max_repeat || n.max > limits_.max_repeat ||
        (n.max >= 0 && n.max < n.min))
      raise<InvalidArgument>("a repetition {{{},{}}} is outside 0 <= m <= n <= {}", n.min, n.max,
                             limits_.max_repeat);
    if (n.max == 0) return;
    const Seq unit = as_unit(n.children.at(0));
    grow(seq, unit.size() * static_cast<size_t>(n.min) + 1);
    for (int32_t i = 0; i < n.min; ++i) seq.insert(seq.end(), unit.begin(), unit.end());
    if (n.max < 0) {  // star ::= unit star | ""
      const uint32_t star = new_rule(fmt::format("({})*", g_.rules.size()));
      Seq body = unit;
      body.push_back(ref(star));
      add_alternative(star, body);
      add_alternative(star, {});
      seq.push_back(ref(star));
      return;
    }
    // opt_k ::= unit opt_{k-1} | "", opt_1 ::= unit | ""
    uint32_t inner = 0;
    for (int32_t k = 1; k <= n.max - n.min; ++k) {
      const uint32_t r = new_rule(fmt::format("({})?", g_.rules.size()));
      Seq body = unit;
      if (k > 1) body.push_back(ref(inner));
      add_alternative(r, body);
      add_alternative(r, {});
      inner = r;
    }
    if (n.max > n.min) seq.push_back(ref(inner));
  }
  Grammar::Element code_point_class(const CodePointRanges& ranges_in) {
    const CodePointRanges ranges = normalize_ranges(ranges_in);
    std::string key;
    for (const auto& [lo, hi] : ranges)
      key += fmt::format("{:x}-{:x},", uint32_t(lo), uint32_t(hi));
    if (auto it = class_rule_.find(key); it != class_rule_.end()) return it->second;
    std::vector<ByteRanges> seqs;
    for (const auto& [lo, hi] : ranges) split_range(lo, std::min(hi, kMaxCodePoint), seqs);
    std::bitset<256> single;
    std::vector<ByteRanges> multi;
    for (const ByteRanges& s : seqs) {
      if (s.size() == 1)
        for (int b = s[0].first; b <= s[0].second; ++b) single.set(static_cast<size_t>(b));
      else
        multi.push_back(s);
    }
    Grammar::Element e{};
    if (multi.empty()) {
      e = bytes(single);
    } else {
      const uint32_t r = new_rule(fmt::format("[{}]", key));
      if (single.any()) add_alternative(r, {bytes(single)});
      for (const ByteRanges& s : multi) {
        Seq body;
        for (const auto& [lo, hi] : s) {
          std::bitset<256> b;
          for (int x = lo; x <= hi; ++x) b.set(static_cast<size_t>(x));
          body.push_back(bytes(b));
        }
        add_alternative(r, body);
      }
      e = ref(r);
    }
    class_rule_.emplace(key, e);
    return e;
  }

  std::vector<bool> nullable() const {
    std::vector<bool> null(g_.rules.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g_.rules.size(); ++r) {
        if (null[r]) continue;
        for (uint32_t a : g_.rules[r]) {
          bool all = true;
          for (uint32_t p = a; g_.elements[p].kind != Grammar::Element::kEnd; ++p)
            if (g_.elements[p].kind == Grammar::Element::kBytes || !null[g_.elements[p].arg]) {
              all = false;
              break;
            }
          if (all) {
            null[r] = changed = true;
            break;
          }
        }
      }
    }
    return null;
  }
  // Edges r -> s where r's alternative may reach s without consuming a byte. A cycle
  // through an edge that leaves something on the stack (s not the alternative's last
  // element) grows the stack forever: refused as left recursion. A cycle of tail edges
  // only (a repetition of something that may match nothing) returns to the same stack,
  // which the matcher's expansion skips.
  void check_left_recursion() {
    const std::vector<bool> null = nullable();
    const size_t n = g_.rules.size();
    struct Edge {
      uint32_t to;
      bool tail;
    };
    std::vector<std::vector<Edge>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (uint32_t a : g_.rules[r])
        for (uint32_t p = a; g_.elements[p].kind == Grammar::Element::kRef; ++p) {
          first[r].push_back(
              {g_.elements[p].arg, g_.elements[p + 1].kind == Grammar::Element::kEnd});
          if (!null[g_.elements[p].arg]) break;
        }
    // Tarjan's strongly connected components.
    std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
    std::vector<uint32_t> stack;
    std::vector<bool> on(n, false);
    int32_t counter = 0, comps = 0;
    std::function<void(uint32_t)> visit = [&](uint32_t v) {
      index[v] = low[v] = counter++;
      stack.push_back(v);
      on[v] = true;
      for (const Edge& e : first[v]) {
        if (index[e.to] < 0) {
          visit(e.to);
          low[v] = std::min(low[v], low[e.to]);
        } else if (on[e.to]) {
          low[v] = std::min(low[v], index[e.to]);
        }
      }
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on[w] = false;
          comp[w] = comps;
        } while (w != v);
        ++comps;
      }
    };
    for (uint32_t v = 0; v < n; ++v)
      if (index[v] < 0) visit(v);
    for (uint32_t v = 0; v < n; ++v)
      for (const Edge& e : first[v]) {
        if (comp[v] != comp[e.to]) continue;
        if (!e.tail) raise<InvalidArgument>("rule '{}' is left-recursive", g_.rule_names[v]);
      }
  }
  // The root must match some finite text.
  void check_productive() const {
    std::vector<bool> prod(g_.rules.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g_.rules.size(); ++r) {
        if (prod[r]) continue;
        for (uint32_t a : g_.rules[r]) {
          bool all = true;
          for (uint32_t p = a; g_.elements[p].kind != Grammar::Element::kEnd; ++p) {
            const auto& e = g_.elements[p];
            if ((e.kind == Grammar::Element::kBytes && g_.byte_sets[e.arg].none()) ||
                (e.kind == Grammar::Element::kRef && !prod[e.arg])) {
              all = false;
              break;
            }
          }
          if (all) {
            prod[r] = changed = true;
            break;
          }
        }
      }
    }
    if (!prod[g_.root]) raise<InvalidArgument>("rule '{}' matches no text", g_.rule_names[g_.root]);
  }

  const GrammarLimits& limits_;
  Grammar g_;
  std::map<std::string, uint32_t> names_;
  std::map<std::string, uint32_t> byte_set_index_;
  std::map<std::string, Grammar::Element> class_rule_;
};

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_range_sequences(char32_t lo,
                                                                           char32_t hi) {
  std::vector<ByteRanges> out;
  split_range(lo, std::min(hi, kMaxCodePoint), out);
  return out;
}

Grammar lower(const std::vector<RuleDefinition>& rules, const std::string& root,
              const GrammarLimits& limits) {
  return Lowering(limits).run(rules, root);
}

}  // namespace tachyon::grammar
