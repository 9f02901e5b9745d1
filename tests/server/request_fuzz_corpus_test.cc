// Replays the request fuzz corpus (seeds plus every input a fuzzer once failed on)
// through the fuzz entry point, so builds without libFuzzer run it too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/request_fuzz_entry.h"

namespace tachyon {
namespace {

TEST(RequestFuzzCorpus, ReplaysCleanly) {
  const std::filesystem::path dir =
      std::filesystem::path(TACHYON_SOURCE_DIR) / "tests/server/corpus/request";
  int files = 0, answered = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string bytes = ss.str();
    SCOPED_TRACE(e.path().string());
    // A copy in its own allocation, so a sanitizer sees reads past its end.
    const std::vector<uint8_t> data(bytes.begin(), bytes.end());
    answered += fuzz::request_one(data.data(), data.size()) ? 1 : 0;
    ++files;
  }
  // The valid seeds are answered, the malformed ones refused (a bug aborts the process).
  EXPECT_GE(files, 20);
  EXPECT_GE(answered, 10);
  EXPECT_LT(answered, files);
  set_log_level(LogLevel::kInfo);
}

}  // namespace
}  // namespace tachyon
