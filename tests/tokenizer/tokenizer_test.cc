// Tokenizers loaded from a tiktoken file (tokenizer.cc), on small rank files written
// here: GLM-4's with its [gMASK] <sop> prefix, and Qwen-1's qwen.tiktoken with its
// specials numbered after the ranks, as the published tokenizers define them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/remote_code_test_util.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::remote_code_test {
namespace {

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
}  // namespace tachyon::remote_code_test
