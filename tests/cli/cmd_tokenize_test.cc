// `tachyon tokenize --jsonl` end to end: one reply per request line, in order, with
// errors reported on their line and the following lines still served.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "tokenizer/test_util.h"

namespace tachyon::testing {
namespace {

std::vector<Json> run_cli(const std::string& dir, const std::vector<std::string>& lines) {
  const std::string binary = std::string(TACHYON_BINARY_DIR) + "/tachyon";
  if (!std::filesystem::exists(binary)) {
    ADD_FAILURE() << binary << " is missing: build the `tachyon` target";
    return {};
  }
  const std::string in = std::string(TACHYON_BINARY_DIR) + "/tokenize_cli_test.jsonl";
  {
    std::ofstream f(in);
    for (const auto& l : lines) f << l << "\n";
  }
  std::string cmd = binary + " tokenize --tokenizer " + dir + " --jsonl < " + in;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  std::vector<Json> replies;
  std::istringstream s(out);
  std::string line;
  while (std::getline(s, line)) replies.push_back(parse_json(line, "reply"));
  return replies;
}

TEST(TokenizeCli, JsonlRequests) {
  auto tok = Tokenizer::load(kjv_dir());
  auto replies = run_cli(
      kjv_dir(),
      {
          R"({"text": "In the beginning", "add_special_tokens": false})",
          R"({"text": "In the beginning"})",
          "not json",
          R"({"ids": [1, 560, 272], "skip_special_tokens": true})",
          R"({"ids": "nope"})",
          R"({"messages": [{"role": "user", "content": "Quote John 3:16"}], "add_generation_prompt": true})",
          R"({"text": "\u00e9\ud83d\ude00"})",
          R"({"ids": [18446744073709551615]})",  // would wrap to -1 as an int64
          R"({"ids": [2147483648]})",
      });
  ASSERT_EQ(replies.size(), 9u);
  EXPECT_EQ(replies[0]["ids"], Json(tok->encode("In the beginning", false)));
  EXPECT_EQ(replies[1]["ids"], Json(tok->encode("In the beginning", true)));
  EXPECT_TRUE(replies[2].contains("error"));
  EXPECT_EQ(replies[3]["text"], tok->decode(std::vector<int32_t>{1, 560, 272}, true));
  EXPECT_TRUE(replies[4].contains("error"));
  EXPECT_EQ(replies[5]["rendered"], "<s>[INST] Quote John 3:16 [/INST]");
  EXPECT_EQ(replies[5]["ids"], Json(tok->encode("<s>[INST] Quote John 3:16 [/INST]", false)));
  EXPECT_EQ(replies[6]["ids"], Json(tok->encode("\xC3\xA9\xF0\x9F\x98\x80", true)));
  EXPECT_TRUE(replies[7].contains("error")) << replies[7].dump();
  EXPECT_TRUE(replies[8].contains("error")) << replies[8].dump();
}

}  // namespace
}  // namespace tachyon::testing
