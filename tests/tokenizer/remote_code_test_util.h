// What the tests of the remote-code families' tokenizers share: a scratch folder, and
// small SentencePiece models trained here (the real tokenizer.model / ice_text.model
// files cannot be fetched), with libsentencepiece's own ids to compare against.
#pragma once

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace tachyon::remote_code_test {

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

inline std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Trains a small BPE SentencePiece model (byte fallback, every character covered) on 40
// copies of `corpus` into dir/<name>.model and loads it into sp.
inline void train_bpe(const TempDir& dir, const std::string& corpus, const std::string& name,
                      int vocab, const std::string& flags,
                      sentencepiece::SentencePieceProcessor& sp) {
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
inline std::vector<int32_t> sp_ids(const sentencepiece::SentencePieceProcessor& sp,
                                   const std::string& text, int32_t offset = 0) {
  std::vector<int> ids;
  EXPECT_TRUE(sp.Encode(text, &ids).ok());
  std::vector<int32_t> out;
  for (int id : ids) out.push_back(id + offset);
  return out;
}

}  // namespace tachyon::remote_code_test
