// ChatGLM2/3's tokenizer (chatglm_backend.cc): the SentencePiece wrapper on a small model
// trained here, its specials numbered after the SentencePiece vocabulary, [gMASK] sop
// prepended, pieces named like a special becoming it. The expected ids come from
// libsentencepiece itself and from the published tokenizer's definitions.
#include <gtest/gtest.h>

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/remote_code_test_util.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::remote_code_test {
namespace {

// A small BPE SentencePiece model, trained as ChatGLM's is laid out: <unk> <s> </s> at
// 0, 1, 2 and byte fallback. "eop" is a whole piece, so that a word containing it shows
// the wrapper turning a piece named like a special token into that token.
class ChatGLMTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("chatglm_tok");
    train_bpe(*dir_,
              "hello world, the people of the geopolitical world say hello again\n"
              "there is a small model here and there; sopping wet tokens\n",
              "tokenizer", 360, "--user_defined_symbols=eop", sp_);
    if (HasFatalFailure()) return;
    base_ = sp_.GetPieceSize();
    Json config = {
        {"tokenizer_class", "ChatGLMTokenizer"},
        {"auto_map", {{"AutoTokenizer", {"tokenization_chatglm.ChatGLMTokenizer", nullptr}}}},
        {"clean_up_tokenization_spaces", false},
        {"do_lower_case", false},
        {"eos_token", "</s>"},
        {"pad_token", "<unk>"},
        {"unk_token", "<unk>"},
        {"padding_side", "left"},
        {"remove_space", false}};
    Json added = Json::object();
    for (auto [offset, name] :
         {std::pair{1, "[gMASK]"}, {3, "sop"}, {6, "<|user|>"}, {7, "<|assistant|>"}})
      added[std::to_string(base_ + offset)] = {{"content", name},      {"lstrip", false},
                                               {"normalized", true},   {"rstrip", false},
                                               {"single_word", false}, {"special", false}};
    config["added_tokens_decoder"] = added;
    dir_->write("tokenizer_config.json", config.dump());
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::vector<int32_t> sp(const std::string& text) { return sp_ids(sp_, text); }

  static inline TempDir* dir_ = nullptr;
  static inline sentencepiece::SentencePieceProcessor sp_;
  static inline int32_t base_ = 0;
};

TEST_F(ChatGLMTokenizerTest, SpecialsFollowTheSentencePieceVocabulary) {
  auto t = Tokenizer::load(dir_->path().string());
  EXPECT_EQ(t->vocab_size(), base_ + 9);
  const char* names[] = {"[MASK]",   "[gMASK]",       "[sMASK]",        "sop", "eop", "<|system|>",
                         "<|user|>", "<|assistant|>", "<|observation|>"};
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(t->token_to_id(names[i]), base_ + i) << names[i];
    EXPECT_EQ(t->id_to_token(base_ + i), names[i]);
  }
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->pad_id(), 0);
}

TEST_F(ChatGLMTokenizerTest, EncodePrefixAddedTokensAndNamedPieces) {
  auto t = Tokenizer::load(dir_->path().string());
  const int32_t gmask = base_ + 1, sop = base_ + 3, eop = base_ + 4, user = base_ + 6;
  EXPECT_EQ(t->encode("hello world", true), cat({{gmask, sop}, sp("hello world")}));
  EXPECT_EQ(t->encode("hello world", false), sp("hello world"));
  // Added tokens split the raw text first; each side is encoded on its own.
  EXPECT_EQ(t->encode("hi<|user|>\n there sop x", false),
            cat({sp("hi"), {user}, sp("\n there "), {sop}, sp(" x")}));
  // "eop" is not an added token, but a SentencePiece piece spelled "eop" is looked up
  // among the wrapper's specials first.
  std::vector<int32_t> want;
  for (int32_t id : sp("geopolitical")) want.push_back(sp_.IdToPiece(id) == "eop" ? eop : id);
  EXPECT_NE(std::find(want.begin(), want.end(), eop), want.end());
  EXPECT_EQ(t->encode("geopolitical", false), want);
  EXPECT_EQ(t->encode("</s>", false), std::vector<int32_t>{2});
}

// In plain ranges no added token is split off (transformers' slow tokenizers with
// split_special_tokens): SentencePiece gets the text.
TEST_F(ChatGLMTokenizerTest, PlainRangesAreSentencePieceText) {
  auto t = Tokenizer::load(dir_->path().string());
  const int32_t user = base_ + 6;
  const std::string text = "hi<|user|>\n there";
  const std::vector<TextRange> all = {{0, text.size()}};
  std::vector<int32_t> ids = t->encode(text, false, all);
  EXPECT_EQ(ids, sp(text));
  EXPECT_EQ(std::find(ids.begin(), ids.end(), user), ids.end());
  // Only the range is text; around it the token is matched.
  const std::vector<TextRange> first = {{0, 2}};
  EXPECT_EQ(t->encode(text, false, first), t->encode(text, false));
  const std::vector<TextRange> inside = {{4, 5}};
  EXPECT_EQ(t->encode(text, false, inside), sp(text));
}

TEST_F(ChatGLMTokenizerTest, DecodeDropsSentencePieceControlsAndNamesSpecials) {
  auto t = Tokenizer::load(dir_->path().string());
  std::vector<int32_t> ids = sp("hello world");
  ids.push_back(2);
  EXPECT_EQ(t->decode(ids, false), "hello world");
  EXPECT_EQ(t->decode(cat({{base_ + 6}, sp("hello")}), false), "<|user|>hello");
  EXPECT_EQ(t->decode(cat({sp("hello"), {base_ + 7}}), true), "hello<|assistant|>");
  std::vector<int32_t> round = t->encode("there is a small model", false);
  EXPECT_EQ(t->decode(round, true), "there is a small model");
}

TEST_F(ChatGLMTokenizerTest, AddedTokenIdsMustMatchTheVocabulary) {
  TempDir bad("chatglm_bad");
  fs::copy_file(dir_->path() / "tokenizer.model", bad.path() / "tokenizer.model");
  Json config = {{"tokenizer_class", "ChatGLMTokenizer"},
                 {"added_tokens_decoder", {{std::to_string(base_ + 2), {{"content", "[gMASK]"}}}}}};
  bad.write("tokenizer_config.json", config.dump());
  EXPECT_THROW(Tokenizer::load(bad.path().string()), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::remote_code_test
