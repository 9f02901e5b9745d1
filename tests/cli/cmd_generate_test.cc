// The `tachyon generate` batch mode (cmd_generate.cc), run as the real binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>

#include "cli/run_command.h"
#include "core/json.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;
const std::string kBin = std::string(TACHYON_BINARY_DIR) + "/tachyon";

using testing::run_command;
std::pair<int, std::string> run(const std::string& cmd) {
  return run_command(cmd);
}

std::vector<Json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<Json> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(Json::parse(line));
  return lines;
}

TEST(CliEngine, GenerateBatchKeepsInputOrderAndReportsBadLines) {
  const Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  const Json& cases = ref["models"]["tiny-kjv-chat"];
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/cli_in.jsonl", out = dir + "/cli_out.jsonl";
  {
    std::ofstream f(in);
    for (const Json& c : cases) f << Json{{"prompt_ids", c["prompt_ids"]}}.dump() << "\n";
    f << "\n";  // blank lines are skipped
    f << R"({"prompt_ids": [1, 2], "generate_config": {"top_p": 0}})"
      << "\n";
    f << R"({"prompt": "In the beginning God created", "generate_config": {"max_new_tokens": 3}})"
      << "\n";
    f << "not json\n";
  }
  const auto [code, stdout_text] =
      run(kBin + " generate --model " + kRoot + "/models/tiny-kjv-chat --input " + in +
          " --output " + out + " --max-new-tokens 6 2>/dev/null");
  EXPECT_EQ(code, 1);  // two lines failed
  const auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), cases.size() + 3);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<int32_t> want = cases[i]["greedy"][0].get<std::vector<int32_t>>();
    want.resize(std::min<size_t>(want.size(), 6));
    if (!want.empty() && want.back() == 2) want.pop_back();  // EOS is never returned
    EXPECT_EQ(lines[i]["output_ids"].get<std::vector<int32_t>>(), want) << i;
    EXPECT_TRUE(lines[i].contains("text"));
    EXPECT_EQ(lines[i]["aux_info"]["input_len"].get<int>(),
              static_cast<int>(cases[i]["prompt_ids"].size()));
    EXPECT_GE(lines[i]["aux_info"]["iter_count"].get<int>(), 1);
  }
  EXPECT_THAT(lines[cases.size()]["error"].get<std::string>(), ::testing::HasSubstr("top_p"));
  // The text prompt is tokenized with BOS, as transformers does: the reference's text case.
  ASSERT_EQ(cases[4]["prompt"].get<std::string>(), "In the beginning God created");
  std::vector<int32_t> first3 = cases[4]["greedy"][0].get<std::vector<int32_t>>();
  first3.resize(3);
  EXPECT_EQ(lines[cases.size() + 1]["output_ids"].get<std::vector<int32_t>>(), first3);
  EXPECT_TRUE(lines[cases.size() + 2].contains("error"));
}

TEST(CliEngine, GenerateFromMegatronCheckpointsWithATokenizerFolder) {
  // The checkpoints carry no tokenizer; --tokenizer's 120 tokens cut the padded vocabulary
  // of 128, so greedy decoding follows transformers' (the padded rows would win otherwise).
  const std::string fx = kRoot + "/tests/model/fixtures/megatron";
  for (const auto& [dir, model] : {std::pair{"llama_core", "llama"}, {"gpt_legacy", "gpt"}}) {
    const Json ref = load_json_file(fx + "/" + model + ".reference.json");
    std::string prompt;
    for (const Json& id : ref["prompt"]) prompt += (prompt.empty() ? "t" : " t") + id.dump();
    const auto [code, out] =
        run(kBin + " generate --model " + fx + "/" + dir + " --tokenizer " + fx +
            "/tokenizer --device cpu --temperature 0 --max-new-tokens 8 --json --prompt '" +
            prompt + "' 2>/dev/null");
    ASSERT_EQ(code, 0) << dir;
    const Json r = Json::parse(out);
    EXPECT_EQ(r["prompt_ids"], ref["prompt"]) << dir;
    EXPECT_EQ(r["output_ids"], ref["greedy_new_ids"]) << dir;
  }
}

TEST(CliEngine, GenerateWithARegexOrAGrammarFile) {
  const std::string model = " --device cpu --model " + kRoot + "/models/tiny-kjv-chat";
  const std::string pattern = "(God|LORD) (said|made) [a-z]+\\.";
  const std::regex re("(God|LORD) (said|made) [a-z]+\\.");
  for (int seed = 0; seed < 4; ++seed) {
    const auto [code, out] = run(
        kBin + " generate" + model + " --prompt 'In the beginning' --temperature 1 --seed " +
        std::to_string(seed) + " --json --max-new-tokens 40 --regex '" + pattern + "' 2>/dev/null");
    ASSERT_EQ(code, 0) << out;
    const Json j = Json::parse(out);
    EXPECT_EQ(j["finish_reason"], "stop");
    EXPECT_TRUE(std::regex_match(j["text"].get<std::string>(), re)) << j["text"];
  }
  const std::string gbnf = ::testing::TempDir() + "/verse.gbnf";
  {
    std::ofstream f(gbnf);
    f << "root ::= \"Verse \" [1-9] [0-9]? \": \" word (\" \" word){2,5} \".\"\nword ::= [a-z]+\n";
  }
  const auto [code, out] = run(kBin + " generate" + model +
                               " --prompt 'In the beginning' --temperature 1 --seed 2 --json "
                               "--max-new-tokens 60 --grammar " +
                               gbnf + " 2>/dev/null");
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(std::regex_match(Json::parse(out)["text"].get<std::string>(),
                               std::regex("Verse [1-9][0-9]?: [a-z]+( [a-z]+){2,5}\\.")))
      << out;
  const auto [bad, err] = run(kBin + " generate" + model + " --prompt x --regex '(a' 2>&1");
  EXPECT_NE(bad, 0);
  EXPECT_THAT(err, ::testing::HasSubstr("regex: an unterminated group"));
}

TEST(CliEngine, GenerateChecksAdapterNames) {
  const std::string model = " --model " + kRoot + "/models/tiny-kjv-chat";
  // generate_config.adapter_name must name an adapter of --lora; the base model's "" runs.
  auto [code, text] = run(kBin + " generate" + model +
                          R"( --prompt-ids 1,2 --generate-config '{"adapter_name": "x"}' 2>&1)");
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("adapter_name 'x' is not an adapter given with --lora"));
  std::tie(code, text) =
      run(kBin + " generate" + model +
          R"( --prompt-ids 1,2 --lora a=/nowhere --generate-config '{"adapter_name": "y"}' 2>&1)");
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("(given: a)"));
  std::tie(code, text) = run(kBin + " generate" + model + " --prompt-ids 1,2 --lora nodir 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("--lora: 'nodir' must be NAME=DIR"));
  std::tie(code, text) =
      run(kBin + " generate" + model +
          R"( --prompt-ids 1,2 --max-new-tokens 2 --generate-config '{"adapter_name": ""}' 2>&1)");
  EXPECT_EQ(code, 0) << text;
  // Per line of --input: each line's own adapter_name.
  const std::string in = ::testing::TempDir() + "/cli_lora_in.jsonl";
  const std::string out = ::testing::TempDir() + "/cli_lora_out.jsonl";
  {
    std::ofstream f(in);
    f << R"({"prompt_ids": [1, 2], "generate_config": {"adapter_name": "zz"}})"
      << "\n";
    f << R"({"prompt_ids": [1, 2], "generate_config": {"adapter_name": 7}})"
      << "\n";
    f << R"({"prompt_ids": [1, 2], "generate_config": {"adapter_name": null}})"
      << "\n";
  }
  std::tie(code, text) = run(kBin + " generate" + model + " --max-new-tokens 2 --input " + in +
                             " --output " + out + " 2>/dev/null");
  EXPECT_EQ(code, 1);
  const auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0]["error"].get<std::string>(), ::testing::HasSubstr("'zz'"));
  EXPECT_THAT(lines[1]["error"].get<std::string>(),
              ::testing::HasSubstr("adapter_name must be an adapter's name"));
  EXPECT_FALSE(lines[2].contains("error"));
  EXPECT_TRUE(lines[2].contains("output_ids"));
}

}  // namespace
}  // namespace tachyon
