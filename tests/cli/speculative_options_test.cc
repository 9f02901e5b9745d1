// The speculative decoding settings (--speculative, --speculative-config, SP_TYPE, ...)
// and their checks (cli/speculative_options.h).
#include "cli/speculative_options.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/fake_env.h"

namespace tachyon::cli {
namespace {

using Env = ::tachyon::testing::FakeEnv;
using Strings = std::vector<std::string>;

SpeculativeOptions options(const Strings& args, const Env& env = {},
                           const std::string& command = "serve") {
  auto v = parse_settings(command, args, env.fn());
  EXPECT_TRUE(v.has_value());
  return speculative_options(*v);
}

std::string error_of(const Strings& args, const Env& env = {}) {
  try {
    options(args, env);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(SpeculativeOptions, OffByDefault) {
  const SpeculativeOptions o = options({});
  EXPECT_EQ(o.method, "");
  EXPECT_EQ(make_proposer(o), nullptr);
}

TEST(SpeculativeOptions, NgramFromFlagsJsonAndRtpLlmVariables) {
  SpeculativeOptions o = options({"--speculative", "ngram", "--num-speculative-tokens", "7"});
  EXPECT_EQ(o.method, "ngram");
  EXPECT_EQ(o.num_speculative_tokens, 7);
  EXPECT_EQ(o.prompt_lookup_min, 1);
  EXPECT_EQ(o.prompt_lookup_max, 4);
  auto p = make_proposer(o);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name(), "ngram");

  o = options({"--speculative-config",
               R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                   "prompt_lookup_max": 5})"});
  EXPECT_EQ(o.method, "ngram");
  EXPECT_EQ(o.num_speculative_tokens, 3);
  EXPECT_EQ(o.prompt_lookup_min, 2);
  EXPECT_EQ(o.prompt_lookup_max, 5);

  Env env;
  env.vars["SP_TYPE"] = "deterministic";
  env.vars["GEN_NUM_PER_CIRCLE"] = "6";
  env.vars["SP_MIN_TOKEN_MATCH"] = "2";
  env.vars["SP_MAX_TOKEN_MATCH"] = "3";
  o = options({}, env, "generate");
  EXPECT_EQ(o.method, "ngram");
  EXPECT_EQ(o.num_speculative_tokens, 6);
  EXPECT_EQ(o.prompt_lookup_min, 2);
  EXPECT_EQ(o.prompt_lookup_max, 3);
}

// The draft model's options; its proposer needs the loaded model (cli/draft_setup.h),
// so make_proposer gives none for it.
TEST(SpeculativeOptions, DraftModelSettings) {
  SpeculativeOptions o =
      options({"--speculative-config", R"({"method": "draft_model", "model": "/m/draft",
                                   "num_speculative_tokens": 4})"});
  EXPECT_EQ(o.method, "draft_model");
  EXPECT_EQ(o.draft_model, "/m/draft");
  EXPECT_EQ(o.num_speculative_tokens, 4);
  o = options({"--draft-model", "/m/d2"});
  EXPECT_EQ(o.method, "draft_model");
  EXPECT_EQ(o.draft_model, "/m/d2");
  EXPECT_EQ(make_proposer(o), nullptr);
  EXPECT_NE(make_proposer(options({"--speculative", "ngram"})), nullptr);
}

TEST(SpeculativeOptions, BadValuesAreClearErrors) {
  auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << msg << "' lacks '" << part << "'";
  };
  has(error_of({"--speculative", "ngram", "--num-speculative-tokens", "0"}),
      "--num-speculative-tokens: 0 is out of range [1, 16]");
  has(error_of({"--speculative", "ngram", "--num-speculative-tokens", "17"}),
      "--num-speculative-tokens: 17 is out of range [1, 16]");
  Env env;
  env.vars["GEN_NUM_PER_CIRCLE"] = "20";
  has(error_of({"--speculative", "ngram"}, env), "GEN_NUM_PER_CIRCLE");
  has(error_of({"--speculative-config", R"({"method": "ngram", "num_speculative_tokens": 40})"}),
      "num_speculative_tokens 40 must be in [1, 16]");
  has(error_of({"--speculative", "ngram", "--prompt-lookup-min", "3", "--prompt-lookup-max", "2"}),
      "prompt_lookup_min <= prompt_lookup_max");
  has(error_of({"--speculative", "ngram", "--prompt-lookup-min", "0"}),
      "--prompt-lookup-min: 0 is out of range");
  has(error_of({"--speculative-config", R"({"method": "ngram", "prompt_lookup_min": 0})"}),
      "1 <= prompt_lookup_min");
  has(error_of({"--speculative-config",
                R"({"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2})"}),
      "prompt_lookup_min <= prompt_lookup_max (got 5 and 2)");
  has(error_of({"--speculative", "medusa"}), "unknown speculative method 'medusa'");
  has(error_of({"--speculative", "ngram", "--draft-model", "/m/d"}),
      "two speculative methods at once");
  has(error_of({"--speculative", "ngram", "--speculative-config",
                R"({"method": "draft_model", "model": "/m"})"}),
      "two speculative methods at once");
  has(error_of({"--speculative-config", "{\"method\": \"ngram\""}), "--speculative-config");
  has(error_of({"--speculative-config", "[1]"}), "must be a JSON object");
  has(error_of({"--speculative-config", "{}"}), "needs \"method\"");
  has(error_of({"--speculative-config", R"({"method": "ngram", "model": "/m"})"}),
      "unknown key \"model\"");
  has(error_of({"--speculative-config", R"({"method": "ngram", "num_speculative_tokens": "5"})"}),
      "must be an integer");
  has(error_of({"--speculative-config", R"({"method": "draft_model"})"}),
      "needs the draft model's folder");
  has(error_of({"--num-speculative-tokens", "4", "--speculative-config",
                R"({"method": "ngram", "num_speculative_tokens": 5})"}),
      "differs");
}

}  // namespace
}  // namespace tachyon::cli
