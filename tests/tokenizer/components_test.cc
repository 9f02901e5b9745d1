// Unit tests of each pipeline component on small hand-built tokenizer.json sections,
// with expectations derived by hand from the documented behaviour of Hugging Face
// `tokenizers` (several are the examples of its documentation).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::tok {
namespace {

std::string norm(const Json& j, std::string s) {
  make_normalizer(j, "normalizer")->normalize(s);
  return s;
}

std::vector<std::string> pre(const Json& j, const std::string& text, bool at_origin = true) {
  Pieces p{{text, at_origin}};
  make_pre_tokenizer(j, "pre_tokenizer")->pre_tokenize(p);
  std::vector<std::string> out;
  for (auto& x : p) out.push_back(x.text);
  return out;
}

std::string dec(const Json& j, std::vector<std::string> tokens) {
  make_decoder(j, "decoder")->decode_chain(tokens);
  std::string out;
  for (auto& t : tokens) out += t;
  return out;
}

std::vector<std::string> dec_tokens(const Json& j, std::vector<std::string> tokens) {
  make_decoder(j, "decoder")->decode_chain(tokens);
  return tokens;
}

using V = std::vector<std::string>;

// ---- normalizers ----------------------------------------------------------------------

TEST(Normalizers, UnicodeForms) {
  EXPECT_EQ(norm({{"type", "NFC"}}, "e\xCC\x81"), "\xC3\xA9");  // e + ́  -> é
  EXPECT_EQ(norm({{"type", "NFD"}}, "\xC3\xA9"), "e\xCC\x81");  // é -> e + ́
  EXPECT_EQ(norm({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");    // ﬁ -> fi
  EXPECT_EQ(norm({{"type", "NFKD"}}, "\xE2\x91\xA0"), "1");     // ① -> 1
  EXPECT_EQ(norm({{"type", "NFKC"}}, "\xEF\xBC\xA1"), "A");     // Ａ -> A
}

TEST(Normalizers, LowercaseStripAccentsStrip) {
  EXPECT_EQ(norm({{"type", "Lowercase"}}, "HeLLo \xC3\x89T\xC3\x89"), "hello \xC3\xA9t\xC3\xA9");
  EXPECT_EQ(norm({{"type", "Lowercase"}}, "\xC4\xB0"), "i\xCC\x87");  // İ -> i̇ (two chars)
  EXPECT_EQ(norm({{"type", "StripAccents"}}, "e\xCC\x81t\xC3\xA9"), "et\xC3\xA9");  // only Mn
  EXPECT_EQ(norm({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " \t a b \n"),
            "a b");
  EXPECT_EQ(norm({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, "  a  "),
            "  a");
  EXPECT_EQ(norm({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}},
                 "\xE3\x80\x80"
                 "a "),
            "a ");  // U+3000 is whitespace
}

TEST(Normalizers, ReplacePrependSequence) {
  Json rep = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
  EXPECT_EQ(norm(rep, "a b  c"),
            "a\xE2\x96\x81"
            "b\xE2\x96\x81\xE2\x96\x81"
            "c");
  Json rx = {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "-"}};
  EXPECT_EQ(norm(rx, "a \t b\n"), "a-b-");
  EXPECT_EQ(norm({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, "x"), "\xE2\x96\x81x");
  EXPECT_EQ(norm({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, ""), "");  // only non-empty
  Json seq = {{"type", "Sequence"},
              {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, rep}}};
  EXPECT_EQ(norm(seq, "Hi you"), "\xE2\x96\x81Hi\xE2\x96\x81you");
}

TEST(Normalizers, Bert) {
  Json j = {{"type", "BertNormalizer"},
            {"clean_text", true},
            {"handle_chinese_chars", true},
            {"strip_accents", nullptr},
            {"lowercase", true}};
  // Control characters go, whitespace becomes ' ', CJK gets spaces, accents follow lowercase.
  EXPECT_EQ(norm(j, "H\xC3\xA9llo\tW\x01orld\xE4\xB8\xAD!"), "hello world \xE4\xB8\xAD !");
  Json keep = j;
  keep["lowercase"] = false;
  EXPECT_EQ(norm(keep, "H\xC3\xA9"), "H\xC3\xA9");
}

TEST(Normalizers, NmtAndUnknownType) {
  EXPECT_EQ(norm({{"type", "Nmt"}},
                 "a\x01"
                 "b\tc"),
            "ab c");
  try {
    make_normalizer({{"type", "Frobnicate"}}, "normalizer");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("normalizer.type"), std::string::npos) << e.what();
  }
}

// ---- pre-tokenizers -------------------------------------------------------------------

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

// ---- decoders -------------------------------------------------------------------------

TEST(Decoders, ByteLevelMetaspaceByteFallback) {
  // Bytes E6 BD A0 map to æ (U+00E6), ½ (U+00BD) and ł (U+0142).
  EXPECT_EQ(dec({{"type", "ByteLevel"}}, {"Hello", "\xC4\xA0world", "\xC3\xA6\xC2\xBD\xC5\x82"}),
            "Hello world\xE6\xBD\xA0");
  // A token with a character outside the byte table keeps its own bytes.
  EXPECT_EQ(dec({{"type", "ByteLevel"}}, {"<|\xE2\x96\x81x|>"}), "<|\xE2\x96\x81x|>");
  // A lone continuation byte becomes U+FFFD.
  EXPECT_EQ(dec({{"type", "ByteLevel"}}, {"a\xC2\xBD"}), "a\xEF\xBF\xBD");
  const std::string m = "\xE2\x96\x81";
  EXPECT_EQ(dec({{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}},
                {m + "Hey", m + "friend"}),
            "Hey friend");
  EXPECT_EQ(
      dec({{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "never"}}, {m + "Hey"}),
      " Hey");
  EXPECT_EQ(dec_tokens({{"type", "ByteFallback"}}, {"<0xE4>", "<0xBD>", "<0xA0>", "a", "<0x61>"}),
            (V{"\xE4\xBD\xA0", "a", "a"}));
  // Invalid bytes: one U+FFFD per byte.
  EXPECT_EQ(dec_tokens({{"type", "ByteFallback"}}, {"<0xE4>", "<0xBD>", "b"}),
            (V{"\xEF\xBF\xBD", "\xEF\xBF\xBD", "b"}));
}

TEST(Decoders, FuseStripReplaceSequence) {
  EXPECT_EQ(dec_tokens({{"type", "Fuse"}}, {"a", "b", "c"}), (V{"abc"}));
  EXPECT_EQ(
      dec_tokens({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}, {"  a  ", " b"}),
      (V{" a ", "b"}));
  Json llama = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(dec(llama, {"\xE2\x96\x81Hi", "<0x21>", "\xE2\x96\x81there"}), "Hi! there");
}

TEST(Decoders, WordPieceBpeCtc) {
  EXPECT_EQ(dec({{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}},
                {"un", "##aff", "##able", ",", "isn", "'", "t", "it", "?"}),
            "unaffable, isn ' t it?");
  // The clean-up runs on each token, not across tokens.
  EXPECT_EQ(dec({{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}, {"i", "do", "not"}),
            "i do not");
  EXPECT_EQ(dec({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, {"hel", "lo</w>", "wor", "ld</w>"}),
            "hello world");
  EXPECT_EQ(dec({{"type", "CTC"},
                 {"pad_token", "<pad>"},
                 {"word_delimiter_token", "|"},
                 {"cleanup", true}},
                {"<pad>", "h", "h", "e", "l", "<pad>", "l", "o", "|", "w"}),
            "hello w");
}

// ---- post-processors ------------------------------------------------------------------

TEST(PostProcessors, TemplateRobertaBertSequence) {
  Json tmpl = {{"type", "TemplateProcessing"},
               {"single",
                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                 {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
               {"special_tokens",
                {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                 {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
  std::vector<int32_t> ids = {7, 8};
  make_post_processor(tmpl, "post_processor")->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 7, 8, 2}));
  ids = {7};
  make_post_processor({{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 0}}},
                      "post_processor")
      ->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 7, 2}));
  ids = {7};
  make_post_processor(
      {{"type", "Sequence"},
       {"processors",
        {{{"type", "ByteLevel"}},
         {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}}}}},
      "post_processor")
      ->process(ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{101, 7, 102}));
  Json bad = tmpl;
  bad["special_tokens"].erase("</s>");
  EXPECT_THROW(make_post_processor(bad, "post_processor"), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::tok
