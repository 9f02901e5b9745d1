// The tokenizers of the remote-code model families, on small files built here (the real
// tokenizer.model / qwen.tiktoken files cannot be fetched): ChatGLM2/3's SentencePiece
// wrapper (specials numbered after the SentencePiece vocabulary, [gMASK] sop prepended,
// pieces named like a special becoming it), GLM-4's tiktoken file with its [gMASK] <sop>
// prefix, and Qwen-1's qwen.tiktoken with its specials numbered after the ranks. The
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

// A small BPE SentencePiece model, trained as ChatGLM's is laid out: <unk> <s> </s> at
// 0, 1, 2 and byte fallback. "eop" is a whole piece, so that a word containing it shows
// the wrapper turning a piece named like a special token into that token.
class ChatGLMTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("chatglm_tok");
    std::string corpus;
    for (int i = 0; i < 40; ++i)
      corpus +=
          "hello world, the people of the geopolitical world say hello again\n"
          "there is a small model here and there; sopping wet tokens\n";
    dir_->write("corpus.txt", corpus);
    const std::string prefix = (dir_->path() / "tokenizer").string();
    auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (dir_->path() / "corpus.txt").string() + " --model_prefix=" + prefix +
        " --model_type=bpe --vocab_size=360 --hard_vocab_limit=false --byte_fallback=true"
        " --character_coverage=1"
        " --user_defined_symbols=eop --num_threads=1 --minloglevel=2");
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_TRUE(sp_.Load(prefix + ".model").ok());
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

  std::vector<int32_t> sp(const std::string& text) {
    std::vector<int> ids;
    EXPECT_TRUE(sp_.Encode(text, &ids).ok());
    return {ids.begin(), ids.end()};
  }

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
