// Unit tests of the pre-tokenizers (pre_tokenizers.cc) on small hand-built
// tokenizer.json sections, with expectations derived by hand from the documented
// behaviour of Hugging Face `tokenizers` (several are the examples of its documentation).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::tok {
namespace {

std::vector<std::string> pre(const Json& j, const std::string& text, bool at_origin = true) {
  Pieces p{{text, at_origin}};
  make_pre_tokenizer(j, "pre_tokenizer")->pre_tokenize(p);
  std::vector<std::string> out;
  for (auto& x : p) out.push_back(x.text);
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizers, SplitBehaviours) {
  // The example of the `tokenizers` documentation.
  auto split = [](const char* behavior) {
    return pre({{"type", "Split"},
                {"pattern", {{"String", "-"}}},
                {"behavior", behavior},
                {"invert", false}},
               "the-final--countdown");
  };
  EXPECT_EQ(split("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
  // Inverted: the matches are what is kept.
  EXPECT_EQ(pre({{"type", "Split"},
                 {"pattern", {{"Regex", "\\p{L}+"}}},
                 {"behavior", "Removed"},
                 {"invert", true}},
                "ab, cd!"),
            (V{"ab", "cd"}));
}

TEST(PreTokenizers, SplitRegexUnicodeAndLookahead) {
  Json j = {{"type", "Split"},
            {"pattern",
             {{"Regex", "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)|\\s+"}}},
            {"behavior", "Isolated"},
            {"invert", false}};
  EXPECT_EQ(pre(j, "It'S 12345  \xC3\xA9t\xC3\xA9"),
            (V{"It", "'S", " ", "123", "45", " ", " \xC3\xA9t\xC3\xA9"}));
  // \s is Unicode White_Space (U+3000 yes, U+180E no), as in Oniguruma.
  EXPECT_EQ(pre({{"type", "Split"},
                 {"pattern", {{"Regex", "\\s"}}},
                 {"behavior", "Removed"},
                 {"invert", false}},
                "a\xE3\x80\x80"
                "b\xE1\xA0\x8E"
                "c"),
            (V{"a",
               "b\xE1\xA0\x8E"
               "c"}));
}

TEST(PreTokenizers, ByteLevel) {
  Json j = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(pre(j, "Hello world!"), (V{"Hello", "\xC4\xA0world", "!"}));  // Ġworld
  j["add_prefix_space"] = true;
  EXPECT_EQ(pre(j, "Hello"), (V{"\xC4\xA0Hello"}));
  Json nore = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  EXPECT_EQ(pre(nore, "a b\n\xC3\xA9"), (V{"a\xC4\xA0"
                                           "b\xC4\x8A\xC3\x83\xC2\xA9"}));  // é = C3 A9
}

TEST(PreTokenizers, Metaspace) {
  const std::string m = "\xE2\x96\x81";
  Json j = {
      {"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pre(j, "Hey friend"), (V{m + "Hey", m + "friend"}));
  EXPECT_EQ(pre(j, " Hey"), (V{m + "Hey"}));  // no second prefix
  j["split"] = false;
  EXPECT_EQ(pre(j, "Hey friend"), (V{m + "Hey" + m + "friend"}));
  j["prepend_scheme"] = "first";
  EXPECT_EQ(pre(j, "Hey", /*at_origin=*/false), (V{"Hey"}));
  EXPECT_EQ(pre(j, "Hey", /*at_origin=*/true), (V{m + "Hey"}));
  j["prepend_scheme"] = "never";
  EXPECT_EQ(pre(j, "Hey you"), (V{"Hey" + m + "you"}));
}

TEST(PreTokenizers, CharacterClassSplitters) {
  EXPECT_EQ(pre({{"type", "Whitespace"}}, "Hey man!  It's 3.5"),
            (V{"Hey", "man", "!", "It", "'", "s", "3", ".", "5"}));
  EXPECT_EQ(pre({{"type", "WhitespaceSplit"}}, "Hey man!\tok"), (V{"Hey", "man!", "ok"}));
  EXPECT_EQ(
      pre({{"type", "Punctuation"}, {"behavior", "Isolated"}}, "Hey friend!     How are you?!?"),
      (V{"Hey friend", "!", "     How are you", "?", "!", "?"}));
  EXPECT_EQ(pre({{"type", "Digits"}, {"individual_digits", true}}, "Call 123 please"),
            (V{"Call ", "1", "2", "3", " please"}));
  EXPECT_EQ(pre({{"type", "Digits"}, {"individual_digits", false}}, "Call 123 please"),
            (V{"Call ", "123", " please"}));
  EXPECT_EQ(pre({{"type", "BertPreTokenizer"}}, "Hey, friend!"), (V{"Hey", ",", "friend", "!"}));
  EXPECT_EQ(pre({{"type", "CharDelimiterSplit"}, {"delimiter", "x"}}, "axbxxc"),
            (V{"a", "b", "c"}));
  Json seq = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(pre(seq, "a12 b"), (V{"a", "1", "2", "b"}));
}

TEST(PreTokenizers, MalformedNamesTheField) {
  try {
    make_pre_tokenizer({{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}}}}},
                       "pre_tokenizer");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("pre_tokenizer.pretokenizers[0].behavior"),
              std::string::npos)
        << e.what();
  }
  try {
    make_pre_tokenizer(
        {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Removed"}},
        "pre_tokenizer");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("pre_tokenizer.pattern.Regex"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tachyon::tok
