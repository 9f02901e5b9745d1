// Unit tests of the normalizers (normalizers.cc) on small hand-built tokenizer.json
// sections, with expectations derived by hand from the documented behaviour of Hugging
// Face `tokenizers` (several are the examples of its documentation).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::tok {
namespace {

std::string norm(const Json& j, std::string s) {
  make_normalizer(j, "normalizer")->normalize(s);
  return s;
}

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

}  // namespace
}  // namespace tachyon::tok
