// Models and added tokens through whole (tiny, hand-built) tokenizer.json files, with
// hand-derived expectations.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
namespace {

using Ids = std::vector<int32_t>;

Json bpe(Json vocab, Json merges, Json extra = Json::object()) {
  Json m = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  for (auto& [k, v] : extra.items()) m[k] = v;
  return m;
}

std::unique_ptr<Tokenizer> make(Json model, Json pre = nullptr, Json added = Json::array(),
                                Json normalizer = nullptr, Json decoder = nullptr) {
  Json tj = {{"version", "1.0"},      {"model", model},           {"pre_tokenizer", pre},
             {"added_tokens", added}, {"normalizer", normalizer}, {"decoder", decoder}};
  return Tokenizer::from_json(tj.dump());
}

TEST(Bpe, MergesByRankThenLeftmost) {
  Json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}};
  // (b,c) outranks (a,b): a|bc, then a+bc.
  auto t = make(bpe(vocab, {"b c", "a b", "a bc"}));
  EXPECT_EQ(t->encode("abc", false), (Ids{5}));
  EXPECT_EQ(t->encode("cab", false), (Ids{2, 3}));
  // Pair-array merges, the newer format.
  auto u = make(bpe(vocab, Json::array({Json::array({"a", "b"}), Json::array({"ab", "c"})})));
  EXPECT_EQ(u->encode("abc", false), (Ids{5}));
  EXPECT_EQ(u->encode("bca", false), (Ids{1, 2, 0}));
  // Equal ranks: the leftmost pair merges first.
  auto w = make(bpe(vocab, {"a a"}));
  EXPECT_EQ(w->encode("aaa", false), (Ids{6, 0}));
  EXPECT_EQ(w->encode("aaaa", false), (Ids{6, 6}));
}

TEST(Bpe, ByteFallbackAndUnknowns) {
  Json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  auto t = make(bpe(vocab, Json::array(), {{"unk_token", "<unk>"}, {"byte_fallback", true}}));
  EXPECT_EQ(t->encode("a\xC3\xA9", false), (Ids{1, 2, 3}));       // é -> its bytes
  EXPECT_EQ(t->encode("a\xF0\x9F\x98\x80", false), (Ids{1, 0}));  // bytes missing -> unk
  EXPECT_EQ(t->decode(Ids{1, 2, 3}, false), "a <0xC3> <0xA9>");   // no decoder: joined by spaces
}

TEST(Bpe, FuseUnkAndDroppedCharacters) {
  Json vocab = {{"<unk>", 0}, {"a", 1}};
  auto fused = make(bpe(vocab, Json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}}));
  EXPECT_EQ(fused->encode("xya", false), (Ids{0, 1}));
  auto unfused = make(bpe(vocab, Json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", false}}));
  EXPECT_EQ(unfused->encode("xya", false), (Ids{0, 0, 1}));
  // Without an unknown token, unknown characters are dropped.
  auto none = make(bpe(vocab, Json::array()));
  EXPECT_EQ(none->encode("xya", false), (Ids{1}));
}

TEST(Bpe, SubwordPrefixSuffixAndIgnoreMerges) {
  Json vocab = {{"h", 0}, {"##i</w>", 1}, {"hi</w>", 2}};
  auto t = make(bpe(vocab, {"h ##i</w>"},
                    {{"continuing_subword_prefix", "##"}, {"end_of_word_suffix", "</w>"}}));
  EXPECT_EQ(t->encode("hi", false), (Ids{2}));
  Json v2 = {{"a", 0}, {"b", 1}, {"ab", 2}, {"abb", 3}};
  EXPECT_EQ(make(bpe(v2, {"a b"}))->encode("abb", false), (Ids{2, 1}));
  EXPECT_EQ(make(bpe(v2, {"a b"}, {{"ignore_merges", true}}))->encode("abb", false), (Ids{3}));
}

TEST(Bpe, MalformedMergesNameTheField) {
  try {
    make(bpe({{"a", 0}}, {"a b"}));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model.merges[0]"), std::string::npos) << e.what();
  }
  try {
    make(bpe({{"a", -4}}, Json::array()));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::from_json("{\"model\": "), InvalidArgument);
  EXPECT_THROW(Tokenizer::from_json("{}"), InvalidArgument);
  EXPECT_THROW(Tokenizer::from_json("[1,2]"), InvalidArgument);
}

TEST(WordPiece, GreedyLongestMatch) {
  Json model = {{"type", "WordPiece"},
                {"unk_token", "[UNK]"},
                {"continuing_subword_prefix", "##"},
                {"max_input_chars_per_word", 100},
                {"vocab", {{"[UNK]", 0}, {"un", 1}, {"##aff", 2}, {"##able", 3}, {"aff", 4}}}};
  auto t = make(model, {{"type", "WhitespaceSplit"}}, Json::array(), nullptr,
                {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}});
  EXPECT_EQ(t->encode("unaffable aff xyz", false), (Ids{1, 2, 3, 4, 0}));
  EXPECT_EQ(t->decode(Ids{1, 2, 3, 4}, false), "unaffable aff");
}

TEST(WordLevel, LookupOrUnknown) {
  Json model = {
      {"type", "WordLevel"}, {"unk_token", "[UNK]"}, {"vocab", {{"[UNK]", 0}, {"hello", 1}}}};
  EXPECT_EQ(make(model, {{"type", "WhitespaceSplit"}})->encode("hello there", false), (Ids{1, 0}));
}

TEST(Unigram, ViterbiBestPathUnknownsAndByteFallback) {
  Json vocab =
      Json::array({Json::array({"<unk>", 0.0}), Json::array({"a", -1.0}), Json::array({"b", -2.0}),
                   Json::array({"ab", -2.5}), Json::array({"abc", -10.0}), Json::array({"c", -3.0}),
                   Json::array({"<0x64>", -5.0})});
  Json model = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}};
  auto t = make(model);
  EXPECT_EQ(t->encode("ab", false), (Ids{3}));       // -2.5 beats a+b = -3
  EXPECT_EQ(t->encode("abc", false), (Ids{3, 5}));   // ab+c = -5.5 beats a+b+c and abc
  EXPECT_EQ(t->encode("xyab", false), (Ids{0, 3}));  // unknown run fused into one <unk>
  model["byte_fallback"] = true;
  auto f = make(model);
  EXPECT_EQ(f->encode("ad", false), (Ids{1, 6}));  // 'd' has no piece: its byte token
}

// ---- added tokens ---------------------------------------------------------------------

Json word_model() {
  return {{"type", "WordLevel"},
          {"unk_token", "[UNK]"},
          {"vocab", {{"[UNK]", 0}, {"hello", 1}, {"world", 2}, {" ", 3}, {"<m>", 4}, {"hi", 5}}}};
}
Json space_split() {
  return {{"type", "Split"},
          {"pattern", {{"String", " "}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}
Json added(int id, const char* content, Json flags = Json::object()) {
  Json a = {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
            {"rstrip", false}, {"normalized", false}, {"special", true}};
  for (auto& [k, v] : flags.items()) a[k] = v;
  return a;
}

TEST(AddedTokens, StripFlags) {
  EXPECT_EQ(make(word_model(), space_split(), {added(4, "<m>")})->encode("hello <m> world", false),
            (Ids{1, 3, 4, 3, 2}));
  EXPECT_EQ(make(word_model(), space_split(), {added(4, "<m>", {{"lstrip", true}})})
                ->encode("hello  <m> world", false),
            (Ids{1, 4, 3, 2}));
  EXPECT_EQ(make(word_model(), space_split(), {added(4, "<m>", {{"rstrip", true}})})
                ->encode("hello <m>  world", false),
            (Ids{1, 3, 4, 2}));
}

TEST(AddedTokens, SingleWordAndLongestMatch) {
  auto t = make(word_model(), space_split(),
                {added(5, "hi", {{"single_word", true}, {"special", false}})});
  EXPECT_EQ(t->encode("hi hello", false), (Ids{5, 3, 1}));
  EXPECT_EQ(t->encode("hihello", false), (Ids{0}));  // not a whole word: left to the model
  Json m = word_model();
  m["vocab"]["<a>"] = 6;
  m["vocab"]["<a><b>"] = 7;
  auto l = make(m, space_split(), {added(6, "<a>"), added(7, "<a><b>")});
  EXPECT_EQ(l->encode("<a><b><a>", false), (Ids{7, 6}));
}

TEST(AddedTokens, NormalizedTokensMatchNormalizedText) {
  Json m = word_model();
  m["vocab"]["<x>"] = 6;
  auto t = make(m, space_split(),
                {added(4, "<M>", {{"normalized", true}, {"special", false}}), added(6, "<X>")},
                {{"type", "Lowercase"}});
  EXPECT_EQ(t->encode("<M> <m>", false), (Ids{4, 3, 4}));
  // Non-normalized: only the raw spelling matches; "<x>" goes through the model.
  EXPECT_EQ(t->encode("<X> <x>", false), (Ids{6, 3, 6}));
  EXPECT_EQ(t->encode("<X>", false), (Ids{6}));
}

TEST(AddedTokens, SkipSpecialTokensOnDecode) {
  auto t = make(word_model(), space_split(), {added(4, "<m>")}, nullptr, {{"type", "Fuse"}});
  EXPECT_EQ(t->decode(Ids{1, 4, 2}, false), "hello<m>world");
  EXPECT_EQ(t->decode(Ids{1, 4, 2}, true), "helloworld");
  EXPECT_EQ(t->decode(Ids{1, 999, -5, 2}, false), "helloworld");  // unknown ids skipped
  EXPECT_TRUE(t->is_special(4));
  EXPECT_FALSE(t->is_special(1));
  EXPECT_EQ(t->token_to_id("<m>"), 4);
  EXPECT_EQ(t->id_to_token(2), "world");
  EXPECT_EQ(t->id_to_token(12345), "");
}

TEST(Config, SpecialTokensBosEosAndChatTemplates) {
  Json tj = {{"model", bpe({{"<s>", 0}, {"</s>", 1}, {"a", 2}}, Json::array())},
             {"added_tokens", {added(0, "<s>"), added(1, "</s>")}}};
  Json config = {{"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                 {"eos_token", "</s>"},
                 {"pad_token", "<pad>"},
                 {"add_bos_token", true},
                 {"add_eos_token", true},
                 {"model_max_length", 4096},
                 {"chat_template", Json::array({{{"name", "default"}, {"template", "T1"}},
                                                {{"name", "tool_use"}, {"template", "T2"}}})}};
  auto t = Tokenizer::from_json(tj.dump(), config.dump());
  EXPECT_EQ(t->bos_token(), "<s>");
  EXPECT_EQ(t->bos_id(), 0);
  EXPECT_EQ(t->eos_id(), 1);
  // No post-processor in the file: add_bos_token / add_eos_token make one.
  EXPECT_EQ(t->encode("a", true), (Ids{0, 2, 1}));
  EXPECT_EQ(t->encode("a", false), (Ids{2}));
  // A special token missing from the vocabulary is added after it.
  EXPECT_EQ(t->pad_id(), 3);
  EXPECT_EQ(t->vocab_size(), 4);
  EXPECT_EQ(t->model_max_length(), 4096);
  EXPECT_EQ(t->chat_template(), "T1");
  EXPECT_EQ(t->chat_template("tool_use"), "T2");
  EXPECT_FALSE(t->chat_template("nope").has_value());
}

}  // namespace
}  // namespace tachyon
