// Replays the jinja fuzz corpus (seeds plus every input a fuzzer once found a bug
// with) through the fuzz entry point, so builds without libFuzzer exercise it too. The
// popular templates among the seeds are kept once, in tests/chat/templates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/jinja_fuzz_entry.h"
#include "fuzz_replay.h"

namespace tachyon {
namespace {

TEST(JinjaFuzzCorpus, ReplaysCleanly) {
  int accepted = 0;
  int files =
      testing::for_each_corpus_input("tests/chat/corpus/jinja", [&](const std::vector<uint8_t>& d) {
        accepted += fuzz::jinja_one(d.data(), d.size()) ? 1 : 0;
      });
  int templates = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(TACHYON_SOURCE_DIR "/tests/chat/templates")) {
    if (e.path().extension() != ".jinja") continue;
    SCOPED_TRACE(e.path().string());
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string s = ss.str();
    std::vector<uint8_t> d(s.begin(), s.end());
    accepted += fuzz::jinja_one(d.data(), d.size()) ? 1 : 0;
    ++templates;
  }
  EXPECT_GE(templates, 7);
  files += templates;
  EXPECT_GE(files, 20);
  EXPECT_GE(accepted, 10);     // the real templates among the seeds render
  EXPECT_LT(accepted, files);  // and the hostile ones are refused
}

}  // namespace
}  // namespace tachyon
