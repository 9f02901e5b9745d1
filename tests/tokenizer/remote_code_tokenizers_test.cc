// The tokenizers of the remote-code model families, on small files built here (the real
// tokenizer.model / ice_text.model / qwen.tiktoken files cannot be fetched): ChatGLM2/3's
// SentencePiece wrapper (specials numbered after the SentencePiece vocabulary, [gMASK]
// sop prepended, pieces named like a special becoming it), the first ChatGLM-6B's
// ice_text.model wrapper (an id offset, whitespace tokens, [gMASK] <sop> appended,
// specials split off with the spaces around them), GLM-4's tiktoken file with its
// [gMASK] <sop> prefix, and Qwen-1's qwen.tiktoken with its specials numbered after the
// ranks. The
// expected ids come from libsentencepiece itself and from the published tokenizers'
// definitions.
#include <gtest/gtest.h>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::temp_directory_path() / ("tachyon_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Trains a small BPE SentencePiece model (byte fallback, every character covered) on 40
// copies of `corpus` into dir/<name>.model and loads it into sp.
void train_bpe(const TempDir& dir, const std::string& corpus, const std::string& name, int vocab,
               const std::string& flags, sentencepiece::SentencePieceProcessor& sp) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += corpus;
  dir.write("corpus.txt", text);
  const std::string prefix = (dir.path() / name).string();
  auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + (dir.path() / "corpus.txt").string() + " --model_prefix=" + prefix +
      " --model_type=bpe --vocab_size=" + std::to_string(vocab) +
      " --hard_vocab_limit=false --byte_fallback=true --character_coverage=1 " + flags +
      " --num_threads=1 --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(sp.Load(prefix + ".model").ok());
}

// sp's ids of text, each plus offset.
std::vector<int32_t> sp_ids(const sentencepiece::SentencePieceProcessor& sp,
                            const std::string& text, int32_t offset = 0) {
  std::vector<int> ids;
  EXPECT_TRUE(sp.Encode(text, &ids).ok());
  std::vector<int32_t> out;
  for (int id : ids) out.push_back(id + offset);
  return out;
}

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

// A tiktoken rank file: the 256 bytes in order, then a few merged tokens.
std::string rank_file(const std::vector<std::string>& merged) {
  static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto b64 = [](const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i += 3) {
      uint32_t v = static_cast<uint8_t>(s[i]) << 16;
      if (i + 1 < s.size()) v |= static_cast<uint8_t>(s[i + 1]) << 8;
      if (i + 2 < s.size()) v |= static_cast<uint8_t>(s[i + 2]);
      out += kB64[(v >> 18) & 63];
      out += kB64[(v >> 12) & 63];
      out += i + 1 < s.size() ? kB64[(v >> 6) & 63] : '=';
      out += i + 2 < s.size() ? kB64[v & 63] : '=';
    }
    return out;
  };
  std::string text;
  int rank = 0;
  for (int b = 0; b < 256; ++b)
    text += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
  for (const auto& m : merged) text += b64(m) + " " + std::to_string(rank++) + "\n";
  return text;
}

const std::vector<std::string> kMerged = {"he", "ll", "hell", "hello", " w", " wor", " world"};

TEST(Glm4Tokenizer, TiktokenWithGMaskSopPrefix) {
  TempDir dir("glm4_tok");
  dir.write("tokenizer.model", rank_file(kMerged));
  const int32_t first = 256 + static_cast<int32_t>(kMerged.size());
  const char* specials[] = {"<|endoftext|>", "[MASK]",         "[gMASK]",    "[sMASK]",
                            "<sop>",         "<eop>",          "<|system|>", "<|user|>",
                            "<|assistant|>", "<|observation|>"};
  Json added = Json::object();
  for (int i = 0; i < 10; ++i)
    added[std::to_string(first + i)] = {{"content", specials[i]}, {"lstrip", false},
                                        {"normalized", false},    {"rstrip", false},
                                        {"single_word", false},   {"special", true}};
  Json config = {{"tokenizer_class", "ChatGLM4Tokenizer"},
                 {"added_tokens_decoder", added},
                 {"eos_token", "<|endoftext|>"},
                 {"pad_token", "<|endoftext|>"},
                 {"clean_up_tokenization_spaces", false}};
  dir.write("tokenizer_config.json", config.dump());
  auto t = Tokenizer::load(dir.path().string());
  const int32_t hello = 256 + 3, world = 256 + 6, gmask = first + 2, sop = first + 4;
  const int32_t user = first + 7;
  EXPECT_EQ(t->encode("hello world", false), (std::vector<int32_t>{hello, world}));
  EXPECT_EQ(t->encode("hello world", true), (std::vector<int32_t>{gmask, sop, hello, world}));
  EXPECT_EQ(t->encode("<|user|>\nhello", false), (std::vector<int32_t>{user, '\n', hello}));
  EXPECT_EQ(t->eos_id(), first);
  EXPECT_EQ(t->decode(std::vector<int32_t>{gmask, sop, hello, world}, true), "hello world");
}

TEST(QwenTokenizer, QwenTiktokenSpecialsFollowTheRanks) {
  TempDir dir("qwen_tok");
  dir.write("qwen.tiktoken", rank_file(kMerged));
  dir.write("tokenizer_config.json",
            R"({"model_max_length": 8192, "tokenizer_class": "QWenTokenizer",
                "auto_map": {"AutoTokenizer": ["tokenization_qwen.QWenTokenizer", null]}})");
  auto t = Tokenizer::load(dir.path().string());
  const int32_t n = 256 + static_cast<int32_t>(kMerged.size());
  EXPECT_EQ(t->token_to_id("<|endoftext|>"), n);
  EXPECT_EQ(t->token_to_id("<|im_start|>"), n + 1);
  EXPECT_EQ(t->token_to_id("<|im_end|>"), n + 2);
  EXPECT_EQ(t->token_to_id("<|extra_204|>"), n + 3 + 204);
  EXPECT_EQ(t->vocab_size(), n + 3 + 205);
  const int32_t hello = 256 + 3;
  // No BOS; the specials are recognised in the text.
  EXPECT_EQ(t->encode("hello", true), std::vector<int32_t>{hello});
  EXPECT_EQ(t->encode("<|im_start|>hello<|im_end|>", false),
            (std::vector<int32_t>{n + 1, hello, n + 2}));
}

}  // namespace
}  // namespace tachyon
