// `tachyon bench` (cmd_bench.cc), run as the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <string>

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

TEST(CliEngine, BenchReportsThroughputAndLatency) {
  const auto [code, text] = run(kBin + " bench --model " + kRoot +
                                "/models/tiny-kjv-chat --num-requests 3 --input-len 8 "
                                "--output-len 4 --concurrency 2 --json 2>/dev/null");
  ASSERT_EQ(code, 0);
  const Json j = Json::parse(text);
  EXPECT_EQ(j["failed"].get<int>(), 0);
  EXPECT_EQ(j["input_tokens"].get<int>(), 24);
  EXPECT_EQ(j["output_tokens"].get<int>(), 12);
  EXPECT_GT(j["total_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["ttft_ms"]["p50"].get<double>(), 0);
  EXPECT_GE(j["engine"]["steps"].get<double>(), 4);
  const auto [bad, ignored] =
      run(kBin + " bench --model " + kRoot +
          "/models/tiny-kjv-chat --concurrency 2 --request-rate 3 2>/dev/null");
  EXPECT_EQ(bad, 1);
}

}  // namespace
}  // namespace tachyon
