// `tachyon perplexity` run as the real binary on the bundled demo model, on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/perplexity.h"
#include "cli/run_command.h"
#include "core/json.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;
const std::string kBin = std::string(TACHYON_BINARY_DIR) + "/tachyon";
const std::string kModel = kRoot + "/models/tiny-kjv-chat";
const std::string kText = kRoot + "/tests/cli/data/kjv_genesis_1.txt";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `tachyon perplexity ARGS` on the CPU: (exit code, stdout, stderr).
struct Outcome {
  int code;
  std::string out, err;
};
Outcome perplexity(const std::string& args) {
  const std::string err = ::testing::TempDir() + "/perplexity_stderr.txt";
  auto [code, out] = testing::run_command(kBin + " perplexity --model " + kModel +
                                          " --device cpu " + args + " 2>" + err);
  return {code, out, read_file(err)};
}

TEST(CliPerplexity, JsonEqualsTheComputationOnTheTokenizedText) {
  const Outcome r = perplexity("--text " + kText + " --ctx 64 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = parse_json(r.out, "stdout");

  const auto tokens = Tokenizer::load(kModel)->encode(read_file(kText), true);
  ASSERT_EQ(tokens[0], 1);  // the tokenizer adds BOS: every chunk opens with it
  LoadOptions cpu;
  cpu.device = Device{};
  const cli::PerplexityResult want =
      cli::compute_perplexity(*load_model(kModel, cpu), tokens, 64, 1, /*chunk_start=*/1);
  EXPECT_EQ(j["text_tokens"].get<int64_t>(), static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(j["ctx"].get<int>(), 64);
  EXPECT_EQ(j["batch"].get<int>(), 1);
  EXPECT_EQ(j["chunks"].get<int64_t>(), static_cast<int64_t>(tokens.size()) / 64);
  EXPECT_EQ(j["scored_tokens"].get<int64_t>(), want.scored_tokens);
  EXPECT_EQ(j["evaluated_tokens"].get<int64_t>(), want.evaluated_tokens);
  EXPECT_NEAR(j["ppl"].get<double>(), want.ppl, 1e-6 * want.ppl);
  EXPECT_NEAR(j["ppl_stderr"].get<double>(), want.ppl_stderr, 1e-6 * want.ppl_stderr);
  EXPECT_NEAR(j["nll"].get<double>(), want.nll, 1e-6);
  EXPECT_NEAR(std::exp(j["nll"].get<double>()), j["ppl"].get<double>(), 1e-9 * want.ppl);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);

  // One progress line per chunk on stderr, the last one the final value.
  const int64_t chunks = want.chunks;
  size_t lines = 0;
  for (size_t p = r.err.find("perplexity: chunk "); p != std::string::npos;
       p = r.err.find("perplexity: chunk ", p + 1))
    ++lines;
  EXPECT_EQ(lines, static_cast<size_t>(chunks)) << r.err;
  const std::string last = "chunk " + std::to_string(chunks) + "/" + std::to_string(chunks) + ",";
  EXPECT_NE(r.err.find(last), std::string::npos) << r.err;
}

TEST(CliPerplexity, BatchesAgreeAndTheTextReportNamesTheFigures) {
  const Outcome one = perplexity("--text " + kText + " --ctx 48 --json");
  const Outcome three = perplexity("--text " + kText + " --ctx 48 --batch 3 --json");
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(three.code, 0) << three.err;
  const Json a = parse_json(one.out, "batch 1"), b = parse_json(three.out, "batch 3");
  EXPECT_EQ(b["batch"].get<int>(), 3);
  EXPECT_EQ(a["scored_tokens"], b["scored_tokens"]);
  EXPECT_NEAR(a["ppl"].get<double>(), b["ppl"].get<double>(), 1e-6 * a["ppl"].get<double>());

  const Outcome text = perplexity("--text " + kText + " --ctx 48 --batch 2");
  ASSERT_EQ(text.code, 0) << text.err;
  char want[64];
  std::snprintf(want, sizeof want, "PPL = %.4f +/- ", a["ppl"].get<double>());
  EXPECT_EQ(text.out.rfind(want, 0), 0u) << text.out;
  const std::string chunks = std::to_string(a["chunks"].get<int64_t>()) + " chunks of 48 tokens";
  EXPECT_NE(text.out.find(chunks), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("tok/s"), std::string::npos) << text.out;
}

TEST(CliPerplexity, DefaultContextIsTheWindowUpTo512) {
  // The demo model's window is 1024 tokens: chunks of 512.
  const std::string path = ::testing::TempDir() + "/perplexity_long.txt";
  {
    std::ofstream f(path);
    const std::string text = read_file(kText);
    f << text << text;
  }
  const Outcome r = perplexity("--text " + path + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = parse_json(r.out, "stdout");
  EXPECT_EQ(j["ctx"].get<int>(), 512);
  EXPECT_EQ(j["chunks"].get<int64_t>(), j["text_tokens"].get<int64_t>() / 512);
  EXPECT_EQ(j["scored_tokens"].get<int64_t>(), 256 * j["chunks"].get<int64_t>());
}

TEST(CliPerplexity, BadInputFailsNamingTheOption) {
  const std::string empty = ::testing::TempDir() + "/perplexity_empty.txt";
  std::ofstream(empty) << " \n\n";
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {
           Case{"--ctx 64", "error: give --text FILE"},
           Case{"--text /nonexistent/text.txt", "error: --text: cannot read '/nonexistent/"},
           Case{"--text " + empty, "error: --text: '" + empty + "' is empty"},
           Case{"--text " + kText + " --ctx 1", "error: --ctx: 1 is too small"},
           Case{"--text " + kText + " --ctx 2048",
                "error: --ctx: 2048 is larger than the model's window (1024 tokens)"},
           Case{"--text " + kText, "do not fill one chunk of --ctx 512 tokens"},
           Case{"--text " + kText + " --batch 0", "error: --batch: 0 is out of range"},
           Case{"--text " + kText + " --ctx -3", "error: --ctx: -3 is out of range"},
       }) {
    const Outcome r = perplexity(c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

}  // namespace
}  // namespace tachyon
