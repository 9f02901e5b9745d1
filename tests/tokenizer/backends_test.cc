// The other tokenizer files: a tiktoken rank file (written here from the llama3
// reference tokenizer, whose ranks are its ids: Llama 3 was converted from tiktoken)
// must tokenize exactly as its tokenizer.json; a SentencePiece model (trained here with
// libsentencepiece's trainer) is used through libsentencepiece with the special-token
// and BOS/EOS handling of transformers' slow tokenizers.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>

#include "core/json.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/test_util.h"

namespace tachyon::testing {
namespace {

namespace fs = std::filesystem;

std::string base64(std::string_view bytes) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(t[(v >> (6 * k)) & 63]);
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

TEST(Tiktoken, RankFileMatchesTokenizerJson) {
  auto ref = load_reference("llama3");
  ASSERT_NE(ref, nullptr);
  const fs::path dir = fs::path(TACHYON_BINARY_DIR) / "tokenizers" / "_tiktoken_llama3";
  fs::create_directories(dir);
  {
    std::ofstream ranks(dir / "tokenizer.model");
    for (int32_t id = 0; id < 128000; ++id) {
      std::string bytes;
      ASSERT_TRUE(tok::byte_level_decode(ref->id_to_token(id), bytes)) << id;
      ranks << base64(bytes) << ' ' << id << '\n';
    }
    // The specials as the config lists them.
    Json config = load_json_file(reference_dir("llama3") + "/tokenizer_config.json");
    config.erase("tokenizer_class");
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
  }
  auto tik = Tokenizer::load(dir.string());
  const std::vector<std::string> texts = {
      "Hello world",
      "I'm sure you've seen it; they'll know.",
      "numbers: 1 12 123 1234 12345",
      "tabs\tand\nnewlines\r\n  mixed   ",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "<|begin_of_text|>hi<|eot_id|>"};
  for (const auto& t : texts) {
    EXPECT_EQ(tik->encode(t, false), ref->encode(t, false)) << t;
    EXPECT_EQ(tik->decode(ref->encode(t, false), false), t);
  }
  EXPECT_EQ(tik->token_to_id("<|eot_id|>"), ref->token_to_id("<|eot_id|>"));
  EXPECT_TRUE(tik->is_special(*tik->token_to_id("<|eot_id|>")));
}

TEST(SentencePiece, ModelFileWithConfig) {
  const fs::path dir = fs::path(TACHYON_BINARY_DIR) / "tokenizers" / "_spm";
  fs::create_directories(dir);
  if (!fs::exists(dir / "tokenizer.model")) {
    std::ofstream corpus(dir / "corpus.txt");
    const char* words[] = {"the", "quick",     "brown", "fox",   "jumps",    "over",  "lazy",
                           "dog", "tokenizer", "model", "piece", "sentence", "hello", "world"};
    for (int i = 0; i < 3000; ++i) {
      corpus << words[i % 14] << ' ' << words[(i * 7) % 14] << ' ' << words[(i * 3) % 14] << ".\n";
    }
    corpus.close();
    auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (dir / "corpus.txt").string() +
        " --model_prefix=" + (dir / "tokenizer").string() +
        " --vocab_size=400 --model_type=bpe --byte_fallback=true --minloglevel=2"
        " --user_defined_symbols=<extra>");
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
             "add_bos_token": true, "add_eos_token": true,
             "additional_special_tokens": ["<extra>"]})";
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((dir / "tokenizer.model").string()).ok());
  auto tok = Tokenizer::load(dir.string());
  std::vector<int> expect;
  sp.Encode("hello world", &expect);
  std::vector<int32_t> ids = tok->encode("hello world", true);
  ASSERT_EQ(ids.size(), expect.size() + 2);
  EXPECT_EQ(ids.front(), sp.bos_id());
  EXPECT_EQ(ids.back(), sp.eos_id());
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end() - 1),
            std::vector<int32_t>(expect.begin(), expect.end()));
  // Special tokens in the text are split off; each chunk is encoded on its own.
  std::vector<int32_t> with = tok->encode("hello<extra>world", false);
  const int extra = sp.PieceToId("<extra>");
  ASSERT_NE(std::find(with.begin(), with.end(), extra), with.end());
  EXPECT_TRUE(tok->is_special(extra));
  EXPECT_EQ(tok->decode(ids, true), "hello world");
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->eos_id(), sp.eos_id());
  // Byte fallback covers characters outside the training text.
  auto cjk = tok->encode("\xE4\xBD\xA0", false);
  EXPECT_EQ(tok->decode(cjk, false), "\xE4\xBD\xA0");
  // In a plain range a special token is text: the whole text is one SentencePiece chunk.
  const std::string text = "hello</s>world";
  const int eos = sp.eos_id();
  std::vector<int32_t> split = tok->encode(text, false);
  EXPECT_NE(std::find(split.begin(), split.end(), eos), split.end());
  std::vector<int> whole;
  sp.Encode(text, &whole);
  for (const std::vector<TextRange>& r :
       {std::vector<TextRange>{{0, text.size()}}, {{5, 9}}, {{8, 9}}, {{3, 6}}}) {
    EXPECT_EQ(tok->encode(text, false, r), std::vector<int32_t>(whole.begin(), whole.end()));
  }
  EXPECT_EQ(tok->encode(text, false, std::vector<TextRange>{{0, 5}}), split);
}

}  // namespace
}  // namespace tachyon::testing
