// Replays the fuzz corpora (seeds plus every input a fuzzer once crashed on) through
// the fuzz entry points, so builds without libFuzzer exercise them too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/fuzz_entries.h"

namespace tachyon {
namespace {

struct Replay {
  int files = 0;
  int accepted = 0;
};

template <typename F>
Replay replay(const std::string& corpus, F&& entry) {
  Replay r;
  std::filesystem::path dir =
      std::filesystem::path(TACHYON_SOURCE_DIR) / "tests/io/corpus" / corpus;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string bytes = ss.str();
    SCOPED_TRACE(e.path().string());
    // A copy in its own allocation, so the sanitizer sees reads past its end.
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    r.accepted += entry(data.data(), data.size()) ? 1 : 0;
    ++r.files;
  }
  return r;
}

TEST(FuzzCorpus, SafetensorsReplaysCleanly) {
  Replay r = replay("safetensors", fuzz::safetensors_one);
  EXPECT_GE(r.files, 5);
  EXPECT_GE(r.accepted, 4);  // the valid seeds still load
  EXPECT_LT(r.accepted, r.files);
  set_log_level(LogLevel::kInfo);
}

TEST(FuzzCorpus, PickleReplaysCleanly) {
  Replay r = replay("pickle", fuzz::pickle_one);
  EXPECT_GE(r.files, 6);
  EXPECT_GE(r.accepted, 5);
  EXPECT_LT(r.accepted, r.files);
  set_log_level(LogLevel::kInfo);
}

}  // namespace
}  // namespace tachyon
