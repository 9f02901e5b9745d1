// The matcher's masks against brute force: for random regexes with a bounded language
// (enumerated with std::regex), a token is allowed iff some text of the language starts
// with the text so far followed by the token; the end-of-sequence token iff the text so
// far is in the language.
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <set>
#include <string>

#include "backend/sampling.h"
#include "core/error.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace tachyon::grammar {
namespace {

const std::string kE = "\xC3\xA9";  // a two-byte character

// Tokens over a, b, c and é: every string of 1 to 3 letters, é whole and in halves, a
// special token and the end-of-sequence token (the last id).
std::shared_ptr<const TokenVocabulary> toy_vocab() {
  std::vector<std::string> t;
  const std::string letters = "abc";
  for (char x : letters) {
    t.emplace_back(1, x);
    for (char y : letters) {
      t.push_back({x, y});
      for (char z : letters) t.push_back({x, y, z});
    }
  }
  for (const std::string& s : {kE, std::string("\xC3"), std::string("\xA9"), "a" + kE, kE + "b",
                               std::string("\xA9") + "c", kE + kE})
    t.push_back(s);
  t.push_back("<s>");
  t.push_back("");
  std::vector<bool> special(t.size(), false);
  special[t.size() - 2] = true;
  return std::make_shared<const TokenVocabulary>(t, special,
                                                 std::vector<int32_t>{int32_t(t.size()) - 1});
}

// A random star-free regex over a, b, c, é; max_len: the longest text it matches.
std::string random_regex(std::mt19937& rng, int depth, int& max_len) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const int k = depth > 2 ? pick(3) : pick(8);
  switch (k) {
    case 0: {
      max_len = 1;
      return std::string(1, "abc"[pick(3)]);
    }
    case 1:
      max_len = 1;
      return "(?:" + kE + ")";
    case 2: {
      max_len = 1;
      const char* classes[] = {"[ab]", "[a-c]", "[bc]", "\\w", "[^\\Wb]"};
      return classes[pick(5)];
    }
    case 3:
    case 4: {  // concatenation
      int a = 0, b = 0;
      std::string s = random_regex(rng, depth + 1, a) + random_regex(rng, depth + 1, b);
      max_len = a + b;
      return s;
    }
    case 5: {  // alternation
      int a = 0, b = 0;
      std::string s =
          "(?:" + random_regex(rng, depth + 1, a) + "|" + random_regex(rng, depth + 1, b) + ")";
      max_len = std::max(a, b);
      return s;
    }
    case 6: {
      int a = 0;
      std::string s = "(?:" + random_regex(rng, depth + 1, a) + ")?";
      max_len = a;
      return s;
    }
    default: {
      int a = 0;
      const int lo = pick(2), hi = lo + pick(3);
      std::string s = "(?:" + random_regex(rng, depth + 1, a) + "){" + std::to_string(lo) + "," +
                      std::to_string(hi) + "}";
      max_len = a * hi;
      return s;
    }
  }
}

// Every text of at most max_units letters that the regex matches.
std::set<std::string> language(const std::string& pattern, int max_units) {
  const std::regex re(pattern, std::regex::ECMAScript);
  const std::string units[] = {"a", "b", "c", kE};
  std::set<std::string> out;
  std::vector<std::string> level{""};
  for (int n = 0; n <= max_units; ++n) {
    std::vector<std::string> next;
    for (const std::string& s : level) {
      if (std::regex_match(s, re)) out.insert(s);
      if (n < max_units)
        for (const std::string& u : units) next.push_back(s + u);
    }
    level = std::move(next);
  }
  return out;
}

TEST(Matcher, MasksEqualBruteForceOnRandomRegexes) {
  auto vocab = toy_vocab();
  const int32_t eos = vocab->size() - 1;
  std::mt19937 rng(1234);
  int checked = 0;
  for (int iter = 0; iter < 400 && checked < 150; ++iter) {
    int max_len = 0;
    const std::string pattern = random_regex(rng, 0, max_len);
    if (max_len > 5) continue;
    ++checked;
    SCOPED_TRACE(pattern);
    const std::set<std::string> lang = language(pattern, max_len);
    GrammarMatcher m(std::make_shared<const CompiledGrammar>(
        build_grammar({GrammarSpec::Kind::kRegex, pattern, {}}), vocab));
    std::string text;
    std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(vocab->size())));
    for (int step = 0; step < 12; ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->size(); ++t) {
        bool expect = false;
        if (t == eos) {
          expect = lang.count(text) > 0;
        } else if (!vocab->is_special(t)) {
          const std::string p = text + vocab->bytes(t);
          for (const std::string& w : lang) expect = expect || w.compare(0, p.size(), p) == 0;
        }
        ASSERT_EQ(token_allowed(mask, t), expect)
            << "after '" << text << "' token " << t << " '" << vocab->bytes(t) << "'";
        if (expect) allowed.push_back(t);
      }
      bool extends = false;
      for (const std::string& w : lang)
        extends = extends || (w.size() > text.size() && w.compare(0, text.size(), text) == 0);
      EXPECT_EQ(m.can_end(), lang.count(text) > 0);
      EXPECT_EQ(m.is_terminated(), lang.count(text) > 0 && !extends);
      if (allowed.empty()) break;
      // A refused token changes nothing.
      for (int32_t t = 0; t < vocab->size(); ++t)
        if (!token_allowed(mask, t)) {
          EXPECT_FALSE(m.accept_token(t));
          break;
        }
      const int32_t t = allowed[rng() % allowed.size()];
      GrammarMatcher fork = m;  // a copy goes on by itself
      ASSERT_TRUE(m.accept_token(t));
      if (t == eos) {
        EXPECT_TRUE(m.is_terminated());
        m.fill_mask(mask);
        for (uint32_t w : mask) EXPECT_EQ(w, 0u);
        break;
      }
      text += vocab->bytes(t);
      EXPECT_EQ(fork.can_end(),
                lang.count(text.substr(0, text.size() - vocab->bytes(t).size())) > 0);
    }
  }
  EXPECT_GE(checked, 100);
}

TEST(Matcher, AcceptsExactlyTheRegexLanguageWithRepetitions) {
  // With * and +, membership of random texts against std::regex.
  const char* patterns[] = {"(ab|c)*a+",  "a(b*c)+|b?", "(a|b)*abb",
                            "[ab]{2,}c*", "(a?b?)*c",   "é+(a|é)*"};
  auto vocab = toy_vocab();
  std::mt19937 rng(7);
  const std::string units[] = {"a", "b", "c", kE};
  for (const char* p : patterns) {
    SCOPED_TRACE(p);
    const std::regex re(p, std::regex::ECMAScript);
    auto g = std::make_shared<const CompiledGrammar>(
        build_grammar({GrammarSpec::Kind::kRegex, p, {}}), vocab);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      for (int n = static_cast<int>(rng() % 7); n > 0; --n) s += units[rng() % 3];
      GrammarMatcher m(g);
      // std::regex sees é as two chars: only texts without it are compared.
      EXPECT_EQ(m.accept_bytes(s) && m.can_end(), std::regex_match(s, re)) << s;
    }
  }
}

TEST(Matcher, NestedRulesAgainstBruteForce) {
  // Balanced parentheses: a prefix is viable iff its depth never goes negative.
  std::vector<std::string> t{"(", ")", "((", "()", ")(", "))", "(()", "())", ")))", ""};
  auto vocab = std::make_shared<const TokenVocabulary>(t, std::vector<bool>(t.size(), false),
                                                       std::vector<int32_t>{9});
  auto g = std::make_shared<const CompiledGrammar>(
      build_grammar({GrammarSpec::Kind::kGrammar, "root ::= item*\nitem ::= \"(\" root \")\"", {}}),
      vocab);
  std::mt19937 rng(3);
  for (int run = 0; run < 30; ++run) {
    GrammarMatcher m(g);
    int depth = 0;
    std::vector<uint32_t> mask(1);
    for (int step = 0; step < 40; ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t k = 0; k < 10; ++k) {
        int d = depth;
        bool ok = true;
        for (char c : t[k]) {
          d += c == '(' ? 1 : -1;
          ok = ok && d >= 0;
        }
        if (k == 9) ok = depth == 0;
        ASSERT_EQ(token_allowed(mask, k), ok) << "depth " << depth << " token " << t[k];
        if (ok) allowed.push_back(k);
      }
      const int32_t k = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(k));
      if (k == 9) break;
      for (char c : t[k]) depth += c == '(' ? 1 : -1;
    }
  }
  GrammarMatcher deep(g);
  EXPECT_THROW(deep.accept_bytes(std::string(5000, '(')), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::grammar
