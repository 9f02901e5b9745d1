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

TEST(CliEngine, BenchSharedPrefixWorkload) {
  const auto [code, text] = run(kBin + " bench --model " + kRoot +
                                "/models/tiny-kjv-chat --num-requests 3 --input-len 8 "
                                "--shared-prefix-len 16 --output-len 4 --concurrency 2 "
                                "--json 2>/dev/null");
  ASSERT_EQ(code, 0);
  const Json j = Json::parse(text);
  EXPECT_EQ(j["failed"].get<int>(), 0);
  EXPECT_EQ(j["shared_prefix_len"].get<int>(), 16);
  EXPECT_EQ(j["input_tokens"].get<int>(), 3 * 24);
  EXPECT_EQ(j["output_tokens"].get<int>(), 12);
  EXPECT_EQ(j["prompt_cache"]["prompt_tokens"].get<int>(), 3 * 24);
  const int cached = j["prompt_cache"]["cached_prompt_tokens"].get<int>();
  EXPECT_GE(cached, 0);
  EXPECT_LE(cached, 2 * 16);  // at most the prefix of the requests after the first
  const auto [tcode, human] = run(kBin + " bench --model " + kRoot +
                                  "/models/tiny-kjv-chat --num-requests 2 --input-len 8 "
                                  "--shared-prefix-len 16 --output-len 2 2>/dev/null");
  EXPECT_EQ(tcode, 0);
  EXPECT_NE(human.find("every prompt opens with the same 16 tokens, then its own 8"),
            std::string::npos)
      << human;
  EXPECT_NE(human.find("cached prompt tokens: "), std::string::npos) << human;
  EXPECT_NE(human.find(" of 48 ("), std::string::npos) << human;
  // Poisson arrivals.
  const auto [ocode, open] = run(kBin + " bench --model " + kRoot +
                                 "/models/tiny-kjv-chat --num-requests 4 --input-len 4 "
                                 "--shared-prefix-len 8 --output-len 2 --request-rate 100 "
                                 "--json 2>/dev/null");
  ASSERT_EQ(ocode, 0);
  EXPECT_EQ(Json::parse(open)["input_tokens"].get<int>(), 4 * 12);
}

TEST(CliEngine, BenchMultiTurnWorkload) {
  const auto [code, text] = run(kBin + " bench --model " + kRoot +
                                "/models/tiny-kjv-chat --num-requests 2 --multi-turn 3 "
                                "--input-len 8 --output-len 4 --concurrency 2 --json 2>/dev/null");
  ASSERT_EQ(code, 0);
  const Json j = Json::parse(text);
  EXPECT_EQ(j["failed"].get<int>(), 0);
  EXPECT_EQ(j["conversations"].get<int>(), 2);
  EXPECT_EQ(j["num_requests"].get<int>(), 6);
  // Turns of 8, 8 + 4 + 8 and 20 + 4 + 8 prompt tokens, in each of 2 conversations.
  EXPECT_EQ(j["input_tokens"].get<int>(), 2 * (8 + 20 + 32));
  EXPECT_EQ(j["output_tokens"].get<int>(), 6 * 4);
  ASSERT_EQ(j["ttft_p50_ms_by_turn"].size(), 3u);
  for (const Json& t : j["ttft_p50_ms_by_turn"]) EXPECT_GT(t.get<double>(), 0);
  EXPECT_GT(j["ttft_p50_ms_first_turn"].get<double>(), 0);
  EXPECT_GT(j["ttft_p50_ms_later_turns"].get<double>(), 0);
  EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0);
  EXPECT_LE(j["prompt_cache"]["cached_prompt_tokens"].get<int>(), 2 * (20 + 32));
  // Poisson arrivals of conversations.
  const auto [ocode, open] = run(kBin + " bench --model " + kRoot +
                                 "/models/tiny-kjv-chat --num-requests 2 --multi-turn 2 "
                                 "--input-len 4 --output-len 2 --request-rate 100 --json "
                                 "2>/dev/null");
  ASSERT_EQ(ocode, 0);
  EXPECT_EQ(Json::parse(open)["input_tokens"].get<int>(), 2 * (4 + 10));
}

TEST(CliEngine, BenchWorkloadFlagsAreChecked) {
  const std::string bench = kBin + " bench --model " + kRoot + "/models/tiny-kjv-chat ";
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {
           Case{"--multi-turn 0", "--multi-turn: 0 is out of range"},
           Case{"--shared-prefix-len -1", "--shared-prefix-len: -1 is out of range"},
           // The demo model takes 1024 tokens.
           Case{"--shared-prefix-len 1000 --input-len 24",
                "prompts of up to 1024 tokens (--shared-prefix-len 1000 + up to 24 of "
                "--input-len"},
           Case{"--multi-turn 6 --input-len 100 --output-len 100",
                "prompts of up to 1100 tokens (--shared-prefix-len 0 + --multi-turn 6 turns"},
           Case{"--prompts /dev/null --shared-prefix-len 4", "give it without --shared-prefix-len"},
       }) {
    const auto [code, out] = run(bench + c.args + " 2>&1");
    EXPECT_NE(code, 0) << c.args;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << "\n" << out;
  }
}

// Runs `tachyon bench-serving ARGS --json` against a `tachyon serve` of the demo model on a
// free port; returns (the bench's exit code, its output).
std::pair<int, std::string> serving_bench(const std::string& args) {
  const std::string script =
      "LOG=$(mktemp); " + kBin + " serve --port 0 --model " + kRoot +
      "/models/tiny-kjv-chat 2>$LOG & PID=$!; "
      "for i in $(seq 600); do grep -q 'ready: ' $LOG && break; sleep 0.1; done; "
      "PORT=$(grep -o 'ready: .* on http://[^ ]*' $LOG | grep -o '[0-9]*$'); " +
      kBin + " bench-serving --url http://127.0.0.1:$PORT " + args +
      " --json 2>/dev/null; RC=$?; kill $PID; wait $PID; rm -f $LOG; exit $RC";
  return run(script);
}

TEST(CliServing, BenchServingWorkloads) {
  {
    const auto [code, text] = serving_bench(
        "--num-requests 3 --concurrency 2 --input-len 8 --output-len 4 --shared-prefix-len 16");
    ASSERT_EQ(code, 0) << text;
    const Json j = Json::parse(text);
    EXPECT_EQ(j["completed"].get<int>(), 3);
    EXPECT_EQ(j["shared_prefix_len"].get<int>(), 16);
    EXPECT_EQ(j["input_tokens"].get<int>(), 3 * 24);  // token-id prompts: exact lengths
    EXPECT_EQ(j["output_tokens"].get<int>(), 3 * 4);
  }
  for (const char* endpoint : {"/v1/completions", "/v1/chat/completions"}) {
    const auto [code, text] =
        serving_bench(std::string("--endpoint ") + endpoint +
                      " --num-requests 2 --multi-turn 3 --input-len 6 --output-len 4");
    ASSERT_EQ(code, 0) << endpoint << "\n" << text;
    const Json j = Json::parse(text);
    EXPECT_EQ(j["num_requests"].get<int>(), 6) << endpoint;
    EXPECT_EQ(j["completed"].get<int>(), 6) << endpoint;
    EXPECT_EQ(j["conversations"].get<int>(), 2) << endpoint;
    EXPECT_EQ(j["output_tokens"].get<int>(), 6 * 4) << endpoint;
    // Each turn holds the one before, its answer and 6 new words: at least
    // 6 + 16 + 26 prompt tokens in each conversation.
    EXPECT_GE(j["input_tokens"].get<int>(), 2 * (6 + 16 + 26)) << endpoint;
    ASSERT_EQ(j["ttft_p50_ms_by_turn"].size(), 3u) << endpoint;
    for (const Json& t : j["ttft_p50_ms_by_turn"]) EXPECT_GT(t.get<double>(), 0) << endpoint;
  }
}

}  // namespace
}  // namespace tachyon
