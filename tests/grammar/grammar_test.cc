// The grammar parsers and lowering: accepted texts, and hostile or malformed input
// refused with InvalidArgument naming the problem.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/parsers.h"

namespace tachyon::grammar {
namespace {

std::shared_ptr<const TokenVocabulary> byte_vocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.push_back("");  // an end-of-sequence token
  return std::make_shared<const TokenVocabulary>(bytes, std::vector<bool>(bytes.size(), false),
                                                 std::vector<int32_t>{256});
}

bool matches(const GrammarSpec& spec, std::string_view text) {
  GrammarMatcher m(std::make_shared<const CompiledGrammar>(build_grammar(spec), byte_vocab()));
  return m.accept_bytes(text) && m.can_end();
}
bool regex_matches(std::string pattern, std::string_view text) {
  return matches({GrammarSpec::Kind::kRegex, std::move(pattern), {}}, text);
}
bool gbnf_matches(std::string g, std::string_view text) {
  return matches({GrammarSpec::Kind::kGrammar, std::move(g), {}}, text);
}

void expect_refused(GrammarSpec::Kind kind, const std::string& text, const std::string& what) {
  try {
    build_grammar({kind, text, {}});
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Regex, MatchesTheWholeText) {
  EXPECT_TRUE(regex_matches("ab+c?", "abbb"));
  EXPECT_FALSE(regex_matches("ab+c?", "a"));
  EXPECT_FALSE(regex_matches("ab", "abab"));
  EXPECT_TRUE(regex_matches("^(cat|dog)s?$", "dogs"));
  EXPECT_TRUE(regex_matches("\\d{3}-\\d{2,}", "123-4567"));
  EXPECT_FALSE(regex_matches("\\d{3}-\\d{2,}", "123-4"));
  EXPECT_TRUE(regex_matches("[^a-c]x", "\xC3\xA9x"));  // a two-byte character
  EXPECT_TRUE(regex_matches("[\\w.]+@\\w+\\.(?:com|org)", "a.b_c@host.org"));
  EXPECT_TRUE(regex_matches("\\u00e9\\x41\\u{1F600}",
                            "\xC3\xA9"
                            "A\xF0\x9F\x98\x80"));
  EXPECT_TRUE(regex_matches("(?<y>\\d{4})-a{0,2}?", "2024-aa"));
  EXPECT_FALSE(regex_matches(".", "\n"));
  EXPECT_TRUE(regex_matches("(a?)*b", "aab"));  // a repetition of a nullable group
  EXPECT_TRUE(regex_matches("(a*)+", ""));
  EXPECT_TRUE(regex_matches("[]]?|x", "x"));
}

TEST(Regex, RefusesWhatItCannotMatch) {
  using K = GrammarSpec::Kind;
  expect_refused(K::kRegex, "(a)\\1", "backreferences are not supported");
  expect_refused(K::kRegex, "a(?=b)", "lookaround is not supported");
  expect_refused(K::kRegex, "(?<!a)b", "lookaround is not supported");
  expect_refused(K::kRegex, "\\bword", "word boundaries are not supported");
  expect_refused(K::kRegex, "(ab", "an unterminated group");
  expect_refused(K::kRegex, "ab)", "an unmatched ')'");
  expect_refused(K::kRegex, "[ab", "an unterminated character class");
  expect_refused(K::kRegex, "a{5,2}", "n < m");
  expect_refused(K::kRegex, "a{5000}", "a repetition count above 1024");
  expect_refused(K::kRegex, "*a", "nothing to repeat");
  expect_refused(K::kRegex, "a^b", "anchors");
  expect_refused(K::kRegex, "[z-a]", "out of order");
  std::string nested = "a";
  for (int i = 0; i < 9; ++i) nested = "(?:" + nested + "){0,1000}";
  expect_refused(K::kRegex, nested, "more than 8192 rules");
  expect_refused(K::kRegex, std::string(300000, 'a'), "more than 262144 elements");
  expect_refused(K::kRegex, std::string(300, '(') + std::string(300, ')'), "nested too deeply");
  expect_refused(K::kRegex, "[^\\s\\S]", "matches no text");
}

TEST(Gbnf, ParsesLlamaCppSyntax) {
  const std::string g = R"(# a list of numbers
root ::= "[" ws ( num ( "," ws num )* )? "]"
num  ::= "-"? [1-9] [0-9]{0,3} | "0"
ws ::=
  [ \t]?
)";
  EXPECT_TRUE(gbnf_matches(g, "[]"));
  EXPECT_TRUE(gbnf_matches(g, "[ 12,-3, 0]"));
  EXPECT_FALSE(gbnf_matches(g, "[12345]"));
  EXPECT_FALSE(gbnf_matches(g, "[01]"));
  EXPECT_TRUE(
      gbnf_matches("root ::= \"\\x41\\u00e9\\U0001F600\\\"\" .", "A\xC3\xA9\xF0\x9F\x98\x80\"z"));
  EXPECT_TRUE(gbnf_matches("root ::= [^\\]x]+ | ( \"a\" | \"b\" ){2,}", "abba"));
  EXPECT_TRUE(gbnf_matches("root ::= a\na ::= \"(\" a \")\" | \"\"", "((()))"));
}

TEST(Gbnf, RefusesBadGrammars) {
  using K = GrammarSpec::Kind;
  expect_refused(K::kGrammar, "", "no rules");
  expect_refused(K::kGrammar, "start ::= \"a\"", "no 'root' rule");
  expect_refused(K::kGrammar, "root ::= item", "rule 'item' is not defined");
  expect_refused(K::kGrammar, "root ::= \"a\"\nroot ::= \"b\"", "defined twice");
  expect_refused(K::kGrammar, "root ::= root \"a\" | \"b\"", "left-recursive");
  expect_refused(K::kGrammar, "root ::= x \"a\" | \"b\"\nx ::= \"\"? root", "left-recursive");
  expect_refused(K::kGrammar, "root ::= x\nx ::= \"\"? root", "matches no text");
  expect_refused(K::kGrammar, "root ::= \"a\" root", "matches no text");
  expect_refused(K::kGrammar, "root ::= \"abc", "unterminated literal");
  expect_refused(K::kGrammar, "root ::= \"\\q\"", "unknown escape");
  expect_refused(K::kGrammar, "root = \"a\"", "expected '::='");
  expect_refused(K::kGrammar,
                 "root ::= (((\"a\"{0,1000}){0,1000}){0,1000}){0,1000}"
                 "(((\"b\"{0,1000}){0,1000}){0,1000}){0,1000}{0,1000}",
                 "more than 8192 rules");
  expect_refused(K::kGrammar, "root ::= \"a\"{3000}", "a repetition count above 1024");
  expect_refused(K::kGrammar, "root ::= \"a\" )", "unexpected ')'");
}

TEST(Choice, MatchesOneOfTheChoices) {
  const GrammarSpec spec{GrammarSpec::Kind::kChoice, "", {"yes", "no", "yes sir", "caf\xC3\xA9"}};
  EXPECT_TRUE(matches(spec, "yes"));
  EXPECT_TRUE(matches(spec, "yes sir"));
  EXPECT_TRUE(matches(spec, "caf\xC3\xA9"));
  EXPECT_FALSE(matches(spec, "ye"));
  EXPECT_FALSE(matches(spec, "nope"));
  expect_refused(GrammarSpec::Kind::kChoice, "", "the list of choices is empty");
}

TEST(Utf8Ranges, EncodeEveryCodePointOnce) {
  // Each code point of a range is matched by exactly one of its byte sequences.
  for (auto [lo, hi] : {std::pair<char32_t, char32_t>{0x70, 0x900},
                        {0xD000, 0xE100},
                        {0xFFF0, 0x10100},
                        {0x10FF00, 0x10FFFF}}) {
    const auto seqs = utf8_range_sequences(lo, hi);
    for (char32_t c = lo; c <= hi; ++c) {
      std::string e;
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      if (c < 0x80)
        e = std::string(1, static_cast<char>(c));
      else if (c < 0x800)
        e = {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
      else if (c < 0x10000)
        e = {char(0xE0 | (c >> 12)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
      else
        e = {char(0xF0 | (c >> 18)), char(0x80 | ((c >> 12) & 0x3F)),
             char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
      int hits = 0;
      for (const auto& s : seqs) {
        if (s.size() != e.size()) continue;
        bool in = true;
        for (size_t i = 0; i < s.size(); ++i) {
          const auto b = static_cast<uint8_t>(e[i]);
          in = in && b >= s[i].first && b <= s[i].second;
        }
        hits += in;
      }
      ASSERT_EQ(hits, 1) << std::hex << uint32_t(c);
    }
  }
}

TEST(Cache, SharesCompiledGrammarsPerKindTextAndVocabulary) {
  GrammarCache cache(2);
  auto v = byte_vocab();
  auto a = cache.get({GrammarSpec::Kind::kRegex, "a+", {}}, v);
  EXPECT_EQ(a, cache.get({GrammarSpec::Kind::kRegex, "a+", {}}, v));
  EXPECT_NE(a, cache.get({GrammarSpec::Kind::kGrammar, "root ::= \"a\"", {}}, v));
  auto other = std::make_shared<const TokenVocabulary>(
      std::vector<std::string>{"a", "b"}, std::vector<bool>{false, false}, std::vector<int32_t>{1});
  EXPECT_NE(a, cache.get({GrammarSpec::Kind::kRegex, "a+", {}}, other));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_THROW(cache.get({GrammarSpec::Kind::kRegex, "(", {}}, v), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::grammar
