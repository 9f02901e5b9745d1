// The first ChatGLM-6B's tokenizer (chatglm6b_backend.cc): the ice_text.model wrapper
// on a small model trained here (an id offset, whitespace tokens, [gMASK] <sop> appended,
// specials split off with the spaces around them). The expected ids come from
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

// A small SentencePiece model with ChatGLM-6B's special-token scheme (ice_text.model
// cannot be fetched): <unk> <s> </s> <pad> at 0..3, byte fallback, and as user-defined
// pieces the whitespace tokens its tokenizer writes (<n>, <|tab|>, <|blank_2|> ..
// <|blank_80|>) and its specials [MASK] [gMASK] [sMASK] <unused_0> <sop> <eop>.
class ChatGLM6BTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("chatglm6b_tok");
    std::string symbols = "<n>,<|tab|>";
    for (int n = 2; n <= 80; ++n) symbols += ",<|blank_" + std::to_string(n) + "|>";
    symbols += ",[MASK],[gMASK],[sMASK],<unused_0>,<sop>,<eop>";
    train_bpe(*dir_,
              "hello world, the people of the world say hello again\n"
              "def f(x):\n    return x  # a comment, with code in it\n",
              "ice_text", 420, "--pad_id=3 --pad_piece=<pad> --user_defined_symbols=" + symbols,
              sp_);
    if (HasFatalFailure()) return;
    // tokenizer_config.json as THUDM/chatglm-6b has it.
    config_ = {
        {"name_or_path", "THUDM/chatglm-6b"},
        {"bos_token", "<sop>"},
        {"eop_token", "<eop>"},
        {"eos_token", "</s>"},
        {"gmask_token", "[gMASK]"},
        {"mask_token", "[MASK]"},
        {"pad_token", "<pad>"},
        {"unk_token", "<unk>"},
        {"remove_space", false},
        {"do_lower_case", false},
        {"tokenizer_class", "ChatGLMTokenizer"},
        {"num_image_tokens", 0},
        {"auto_map", {{"AutoTokenizer", {"tokenization_chatglm.ChatGLMTokenizer", nullptr}}}}};
    write(*dir_, config_);
  }
  static void TearDownTestSuite() { delete dir_; }

  static void write(const TempDir& dir, const Json& config) {
    if (!fs::exists(dir.path() / "ice_text.model"))
      fs::copy_file(dir_->path() / "ice_text.model", dir.path() / "ice_text.model");
    dir.write("tokenizer_config.json", config.dump());
  }

  // SentencePiece's ids of text the tokenizer has already rewritten, plus the offset.
  static std::vector<int32_t> sp(const std::string& rewritten, int32_t offset = 0) {
    return sp_ids(sp_, rewritten, offset);
  }
  static int32_t piece(const char* p, int32_t offset = 0) { return sp_.PieceToId(p) + offset; }

  static inline TempDir* dir_ = nullptr;
  static inline sentencepiece::SentencePieceProcessor sp_;
  static inline Json config_;
};

TEST_F(ChatGLM6BTokenizerTest, IdsAreThePiecesAndTheSpecialsTheHubNames) {
  auto t = Tokenizer::load(dir_->path().string());
  EXPECT_EQ(t->vocab_size(), sp_.GetPieceSize());
  for (const char* p : {"[MASK]", "[gMASK]", "<sop>", "<eop>", "<n>", "<|blank_80|>"}) {
    EXPECT_EQ(t->token_to_id(p), piece(p)) << p;
    EXPECT_EQ(t->id_to_token(piece(p)), p);
  }
  EXPECT_EQ(t->bos_id(), piece("<sop>"));
  EXPECT_EQ(t->eos_id(), 2);  // "</s>" in the hub's tokenizer_config.json
  EXPECT_EQ(t->pad_id(), 3);
  EXPECT_TRUE(t->is_special(piece("<sop>")));
  EXPECT_TRUE(t->is_special(piece("[MASK]")));
  EXPECT_FALSE(t->is_special(piece("[gMASK]")));  // not one of transformers' special tokens
}

TEST_F(ChatGLM6BTokenizerTest, WhitespaceTokensAndTheGMaskSopSuffix) {
  auto t = Tokenizer::load(dir_->path().string());
  const int32_t gmask = piece("[gMASK]"), sop = piece("<sop>");
  auto with_suffix = [&](std::vector<int32_t> ids) {
    ids.push_back(gmask);
    ids.push_back(sop);
    return ids;
  };
  EXPECT_EQ(t->encode("hello world", true), with_suffix(sp("hello world")));
  EXPECT_EQ(t->encode("hello world", false), sp("hello world"));
  EXPECT_EQ(t->encode("def f(x):\n    return x\tend", false),
            sp("def f(x):<n><|blank_4|>return x<|tab|>end"));
  // Runs of spaces: blocks of 80 first, a single space stays a space.
  EXPECT_EQ(t->encode("a" + std::string(85, ' ') + "b", false), sp("a<|blank_80|><|blank_5|>b"));
  EXPECT_EQ(t->encode("a" + std::string(81, ' ') + "b" + std::string(160, ' '), false),
            sp("a<|blank_80|> b<|blank_80|><|blank_80|>"));
  EXPECT_EQ(t->encode("\n\nhi", false), sp("<n><n>hi"));
}

TEST_F(ChatGLM6BTokenizerTest, SpecialsAreSplitOffWithTheSpacesAroundThem) {
  auto t = Tokenizer::load(dir_->path().string());
  const int32_t sop = piece("<sop>"), mask = piece("[MASK]"), pad = piece("<pad>");
  auto cat3 = [](std::vector<int32_t> a, int32_t b, std::vector<int32_t> c) {
    a.push_back(b);
    a.insert(a.end(), c.begin(), c.end());
    return a;
  };
  // transformers 4.27 strips the whitespace on both sides of a plain-string special.
  EXPECT_EQ(t->encode("hello  <sop>\n world", false), cat3(sp("hello"), sop, sp("world")));
  EXPECT_EQ(t->encode("the [MASK] world", false), cat3(sp("the"), mask, sp("world")));
  EXPECT_EQ(t->encode("x<pad>y", false), cat3(sp("x"), pad, sp("y")));
  // [gMASK] is not split off: SentencePiece finds its user-defined piece, spaces kept.
  std::vector<int32_t> want = sp("the [gMASK] world");
  EXPECT_NE(std::find(want.begin(), want.end(), piece("[gMASK]")), want.end());
  EXPECT_EQ(t->encode("the [gMASK] world", false), want);
  // An AddedToken object strips only as its lstrip / rstrip say.
  TempDir dir("chatglm6b_added");
  Json c = config_;
  c["mask_token"] = {{"content", "[MASK]"}, {"lstrip", true}, {"rstrip", false}};
  write(dir, c);
  auto t2 = Tokenizer::load(dir.path().string());
  EXPECT_EQ(t2->encode("the [MASK] world", false), cat3(sp("the"), mask, sp(" world")));
}

TEST_F(ChatGLM6BTokenizerTest, PlainRangesAreNotSplitOrStripped) {
  auto t = Tokenizer::load(dir_->path().string());
  const std::string text = "the [MASK] world";
  const std::vector<TextRange> all = {{0, text.size()}}, mask = {{4, 10}}, none;
  EXPECT_EQ(t->encode(text, false, all), sp("the [MASK] world"));
  EXPECT_EQ(t->encode(text, false, mask), t->encode(text, false, all));
  EXPECT_EQ(t->encode(text, false, none), t->encode(text, false));
  EXPECT_NE(t->encode(text, false, all), t->encode(text, false));
}

TEST_F(ChatGLM6BTokenizerTest, DecodeRestoresWhitespaceAndDropsPadAndSpecials) {
  auto t = Tokenizer::load(dir_->path().string());
  const std::string text = "def f(x):\n    return x\tend\n\n" + std::string(85, ' ') + "ok";
  std::vector<int32_t> ids = t->encode(text, false);
  EXPECT_EQ(t->decode(ids, false), text);
  ids.insert(ids.begin(), 3);  // <pad>
  ids.push_back(piece("<sop>"));
  EXPECT_EQ(t->decode(ids, true), text);
  // transformers 4.27 cleans up tokenization spaces unless the config says otherwise.
  EXPECT_EQ(t->decode(t->encode("hello , world .", false), false), "hello, world.");
  // Streaming gives the same text.
  auto inc = t->make_incremental_decoder(false);
  std::string streamed;
  for (int32_t id : t->encode(text, false)) streamed += inc->step(id);
  streamed += inc->flush();
  EXPECT_EQ(streamed, text);
}

TEST_F(ChatGLM6BTokenizerTest, ImageTokenOffsetRemoveSpaceAndRefusals) {
  // Without num_image_tokens the class default, 20000, shifts every piece.
  TempDir dir("chatglm6b_offset");
  Json c = config_;
  c.erase("num_image_tokens");
  c["remove_space"] = true;
  write(dir, c);
  auto t = Tokenizer::load(dir.path().string());
  const int32_t off = 20000;
  EXPECT_EQ(t->vocab_size(), off + sp_.GetPieceSize());
  EXPECT_EQ(t->token_to_id("<sop>"), piece("<sop>", off));
  EXPECT_EQ(t->id_to_token(17), "<image_17>");
  EXPECT_EQ(t->token_to_id("<image_17>"), 17);
  // remove_space: the whitespace runs collapse to one space and the ends go.
  std::vector<int32_t> want = sp("hello world", off);
  want.push_back(piece("[gMASK]", off));
  want.push_back(piece("<sop>", off));
  EXPECT_EQ(t->encode("  hello \t  world  ", true), want);
  std::vector<int32_t> with_image = sp("hello", off);
  with_image.insert(with_image.begin(), 17);
  EXPECT_EQ(t->decode(with_image, false), "hello");

  TempDir bad("chatglm6b_bad");
  Json lower = config_;
  lower["do_lower_case"] = true;
  write(bad, lower);
  EXPECT_THROW(Tokenizer::load(bad.path().string()), InvalidArgument);
  Json no_gmask = config_;
  no_gmask["gmask_token"] = "[NOPE]";
  write(bad, no_gmask);
  EXPECT_THROW(Tokenizer::load(bad.path().string()), InvalidArgument);
  Json images = config_;
  images["num_image_tokens"] = -4;
  write(bad, images);
  EXPECT_THROW(Tokenizer::load(bad.path().string()), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::remote_code_test
