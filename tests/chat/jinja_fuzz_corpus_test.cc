// Replays the jinja fuzz corpus (seeds plus every input a fuzzer once found a bug
// with) through the fuzz entry point, so builds without libFuzzer exercise it too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "chat/jinja_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(JinjaFuzzCorpus, ReplaysCleanly) {
  int files = 0, accepted = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(TACHYON_SOURCE_DIR "/tests/chat/corpus/jinja")) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string bytes = ss.str();
    SCOPED_TRACE(e.path().string());
    // A copy in its own allocation, so a sanitizer sees reads past its end.
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    accepted += fuzz::jinja_one(data.data(), data.size()) ? 1 : 0;
    ++files;
  }
  EXPECT_GE(files, 20);
  EXPECT_GE(accepted, 10);     // the real templates among the seeds render
  EXPECT_LT(accepted, files);  // and the hostile ones are refused
}

}  // namespace
}  // namespace tachyon
