// The LoRA settings (--lora, --lora-modules, LORA_INFO, ...) and their checks
// (cli/lora_options.h).
#include "cli/lora_options.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/fake_env.h"

namespace tachyon::cli {
namespace {

using Env = ::tachyon::testing::FakeEnv;

LoraOptions options(const std::vector<std::string>& args, const Env& env = {},
                    const std::string& command = "serve") {
  auto v = parse_settings(command, args, env.fn());
  EXPECT_TRUE(v.has_value());
  return lora_options(*v);
}

// The message of the InvalidArgument that parsing or checking throws ("" when none).
std::string error_of(const std::vector<std::string>& args, const Env& env = {}) {
  try {
    options(args, env);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> names(const LoraOptions& o) {
  std::vector<std::string> out;
  for (const auto& a : o.adapters) out.push_back(a.name + "=" + a.path);
  return out;
}

using Strings = std::vector<std::string>;

TEST(LoraOptions, DefaultsWithoutAdapters) {
  const LoraOptions o = options({});
  EXPECT_TRUE(o.adapters.empty());
  EXPECT_FALSE(o.enabled);
  EXPECT_FALSE(o.merge);
  EXPECT_EQ(o.max_loras, 4);
  EXPECT_EQ(o.max_rank, 16);
  EXPECT_EQ(o.max_registered, 64);
  EXPECT_TRUE(options({"--enable-lora"}).enabled);
  EXPECT_TRUE(options({}, {{{"TACHYON_ENABLE_LORA", "1"}}}).enabled);
}

TEST(LoraOptions, RepeatedFlagsAndVllmModules) {
  LoraOptions o = options({"--lora", "a=/x", "--lora=b=/y"});
  EXPECT_EQ(names(o), (Strings{"a=/x", "b=/y"}));
  EXPECT_TRUE(o.enabled);
  // vLLM: several values after one flag, and its JSON item form.
  o = options({"--lora-modules", "a=/x", R"({"name": "b", "path": "/y,z"})", "--max-loras", "2"});
  EXPECT_EQ(names(o), (Strings{"a=/x", "b=/y,z"}));
  EXPECT_EQ(o.max_loras, 2);
  // Generate takes them too; a path may hold '='.
  o = options({"--lora", "a=/p=q"}, {}, "generate");
  EXPECT_EQ(names(o), (Strings{"a=/p=q"}));
}

TEST(LoraOptions, EnvironmentAndLoraInfo) {
  EXPECT_EQ(names(options({}, {{{"TACHYON_LORA", "a=/x,b=/y"}}})), (Strings{"a=/x", "b=/y"}));
  // RTP-LLM's LORA_INFO: one JSON object (its commas do not split it).
  const LoraOptions o = options({}, {{{"LORA_INFO", R"({"a": "/x", "b": "/y"})"}}});
  EXPECT_EQ(names(o), (Strings{"a=/x", "b=/y"}));
  EXPECT_TRUE(o.enabled);
  EXPECT_EQ(names(options({}, {{{"LORA_INFO", "{}"}}})), Strings{});
  // A flag wins over the environment.
  EXPECT_EQ(names(options({"--lora", "c=/z"}, {{{"LORA_INFO", R"({"a": "/x"})"}}})),
            (Strings{"c=/z"}));
  EXPECT_EQ(options({}, {{{"MAX_LORA_MODEL_SIZE", "9"}}}).max_registered, 9);
}

TEST(LoraOptions, ConfigFileList) {
  const std::string path = ::testing::TempDir() + "lora_options.yaml";
  std::ofstream(path) << "lora:\n  - a=/x\n  - b=/y\nmax-lora-rank: 64\n";
  const LoraOptions o = options({"--config", path});
  EXPECT_EQ(names(o), (Strings{"a=/x", "b=/y"}));
  EXPECT_EQ(o.max_rank, 64);
}

TEST(LoraOptions, MergeTakesExactlyOneAdapter) {
  const LoraOptions o = options({"--lora", "a=/x", "--merge-lora"});
  EXPECT_TRUE(o.merge);
  EXPECT_FALSE(o.enabled);
  EXPECT_NE(error_of({"--merge-lora"}).find("exactly one adapter into the weights; 0 given"), std::string::npos);
  EXPECT_NE(error_of({"--lora", "a=/x", "b=/y", "--merge-lora"}).find("2 given"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora", "a=/x", "--merge-lora", "--enable-lora"}).find("--enable-lora"),
            std::string::npos);
}

TEST(LoraOptions, BadItemsAreRefusedNamingTheSource) {
  EXPECT_NE(error_of({"--lora", "nodir"}).find("--lora: 'nodir' must be NAME=DIR"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora-modules", "a=/x", "b"}).find("--lora-modules: 'b'"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora", "=/x"}).find("must not be empty"), std::string::npos);
  EXPECT_NE(error_of({"--lora", "a="}).find("adapter 'a' has an empty path"), std::string::npos);
  EXPECT_NE(error_of({"--lora", "a b=/x"}).find("may hold only letters"), std::string::npos);
  EXPECT_NE(error_of({"--lora", std::string(129, 'n') + "=/x"}).find("longer than 128"),
            std::string::npos);
  EXPECT_EQ(error_of({"--lora", "v1.2_x-y/z:w=/x"}), "");
  EXPECT_NE(error_of({"--lora", "a=/x", "--lora", "a=/y"}).find("adapter 'a' is given twice"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora", R"({"name": "a"})"}).find("must be NAME=DIR or"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora", R"({"name": "a", "path": 3})"}).find("\"path\" must be a string"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora", R"({"name": "a", "path": "/x", "base_model_name": "m"})"})
                .find("unknown key 'base_model_name'"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora", "{bad"}).find("--lora"), std::string::npos);
}

TEST(LoraOptions, LoraInfoMustBeAnObjectOfStrings) {
  EXPECT_NE(error_of({}, {{{"LORA_INFO", R"(["a"])"}}}).find("LORA_INFO must be a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of({}, {{{"LORA_INFO", R"({"a": 1})"}}})
                .find("the path of adapter 'a' must be a string"),
            std::string::npos);
  EXPECT_NE(error_of({}, {{{"LORA_INFO", "a=/x"}}}).find("LORA_INFO"), std::string::npos);
  EXPECT_NE(error_of({}, {{{"LORA_INFO", R"({"a b": "/x"})"}}}).find("may hold only letters"),
            std::string::npos);
}

TEST(LoraOptions, Limits) {
  LoraOptions o = options({"--max-loras", "100"});
  EXPECT_EQ(o.max_registered, 100);  // the default grows to --max-loras
  EXPECT_NE(error_of({"--max-loras", "8", "--max-cpu-loras", "4"})
                .find("--max-cpu-loras (4) must be at least --max-loras (8)"),
            std::string::npos);
  EXPECT_NE(error_of({"--lora", "a=/x", "b=/y", "c=/z", "--max-loras", "1", "--max-cpu-loras", "2"})
                .find("3 adapters given; --max-cpu-loras allows 2"),
            std::string::npos);
  EXPECT_NE(error_of({"--max-lora-rank", "0"}).find("out of range"), std::string::npos);
  EXPECT_NE(error_of({"--max-loras", "x"}).find("not an integer"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::cli
