// Unit tests of the decoders (decoders.cc) on small hand-built tokenizer.json sections,
// with expectations derived by hand from the documented behaviour of Hugging Face
// `tokenizers` (several are the examples of its documentation).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::tok {
namespace {

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

}  // namespace
}  // namespace tachyon::tok
