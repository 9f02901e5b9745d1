#include "server/serve_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/fake_env.h"

namespace tachyon::server {
namespace {

using Env = ::tachyon::testing::FakeEnv;

ServeConfig load(const std::vector<std::string>& args, const Env& env = {}) {
  auto c = load_serve_config(args, env.fn(), nullptr);
  EXPECT_TRUE(c.has_value());
  return *c;
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ServeConfig, DefaultsBindToLocalhost) {
  ServeConfig c = load({});
  EXPECT_EQ(c.host, "127.0.0.1");
  EXPECT_EQ(c.port, 8088);
  EXPECT_TRUE(c.model.empty());
  EXPECT_TRUE(c.api_keys.empty());
  EXPECT_FALSE(c.log_requests);
}

TEST(ServeConfig, FlagsEnvironmentRtpNamesAndFileInOrder) {
  std::string file = write_file("serve.yaml",
                                "port: 7000\nmax_concurrency: 5\nhost: 0.0.0.0\nmodel: /from/file\n"
                                "api-key: [a, b]\nlog_requests: true\nrequest_timeout: 2.5\n");
  Env env;
  env.vars = {{"START_PORT", "7100"},     {"TACHYON_PORT", "7200"},
              {"CONCURRENCY_LIMIT", "9"}, {"CHECKPOINT_PATH", "/from/rtp"},
              {"TOKENIZER_PATH", "/tok"}, {"MODEL_TYPE", "qwen_2"},
              {"MAX_SEQ_LEN", "512"}};
  ServeConfig c = load({"--config", file, "--port=7300"}, env);
  EXPECT_EQ(c.port, 7300);          // flag beats everything
  EXPECT_EQ(c.max_concurrency, 9);  // RTP-LLM's name beats the file
  EXPECT_EQ(c.model, "/from/rtp");
  EXPECT_EQ(c.tokenizer, "/tok");
  EXPECT_EQ(c.model_type, "qwen_2");
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_EQ(c.host, "0.0.0.0");  // only in the file
  EXPECT_EQ(c.api_keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(c.log_requests);
  EXPECT_DOUBLE_EQ(c.request_timeout_s, 2.5);
  ServeConfig c2 = load({"--config", file}, env);
  EXPECT_EQ(c2.port, 7200);  // TACHYON_PORT beats START_PORT
  env.vars.erase("TACHYON_PORT");
  EXPECT_EQ(load({"--config", file}, env).port, 7100);
  env.vars.erase("START_PORT");
  EXPECT_EQ(load({"--config", file}, env).port, 7000);
}

TEST(ServeConfig, JsonConfigAndRepeatedKeys) {
  std::string file = write_file("serve.json", R"({"port": 9001, "max_n": 4, "progress": false})");
  ServeConfig c = load({"--config", file, "--api-key", "k1", "--api-key", "k2", "--log-requests"});
  EXPECT_FALSE(load({"--progress", "false", "--port", "1"}).progress);
  EXPECT_EQ(load({"--progress", "false", "--port", "1"}).port, 1);
  EXPECT_EQ(c.port, 9001);
  EXPECT_EQ(c.max_n, 4);
  EXPECT_FALSE(c.progress);
  EXPECT_EQ(c.api_keys, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_TRUE(c.log_requests);
  Env env;
  env.vars = {{"TACHYON_API_KEY", "x,y"}};
  EXPECT_EQ(load({}, env).api_keys, (std::vector<std::string>{"x", "y"}));
}

TEST(ServeConfig, SpecialTokensInContentAreOffUnlessAllowed) {
  EXPECT_FALSE(load({}).allow_special_tokens_in_content);
  EXPECT_TRUE(load({"--allow-special-tokens-in-content"}).allow_special_tokens_in_content);
  Env env;
  env.vars = {{"TACHYON_ALLOW_SPECIAL_TOKENS_IN_CONTENT", "true"}};
  EXPECT_TRUE(load({}, env).allow_special_tokens_in_content);
  EXPECT_FALSE(load({"--no-allow-special-tokens-in-content"}, env).allow_special_tokens_in_content);
}

TEST(ServeConfig, EngineSizing) {
  ServeConfig c = load({});
  EXPECT_DOUBLE_EQ(c.gpu_memory_fraction, 0.9);
  EXPECT_LT(c.swap_space_gb, 0);  // the device's default
  c = load({"--gpu-memory-fraction", "0.5", "--swap-space", "8", "--kv-cache-dtype", "fp8"});
  EXPECT_DOUBLE_EQ(c.gpu_memory_fraction, 0.5);
  EXPECT_DOUBLE_EQ(c.swap_space_gb, 8);
  EXPECT_EQ(c.kv_cache_dtype, "fp8");
  Env env;
  env.vars = {{"TACHYON_SWAP_SPACE", "0"}, {"TACHYON_GPU_MEMORY_FRACTION", "0.75"}};
  c = load({}, env);
  EXPECT_DOUBLE_EQ(c.swap_space_gb, 0);
  EXPECT_DOUBLE_EQ(c.gpu_memory_fraction, 0.75);
  for (const auto& args : std::vector<std::vector<std::string>>{{"--swap-space", "-1"},
                                                                {"--gpu-memory-fraction", "1.5"},
                                                                {"--gpu-memory-fraction", "0"}})
    EXPECT_THROW(load_serve_config(args, Env{}.fn(), nullptr), InvalidArgument) << args[1];
}

TEST(ServeConfig, RefusesBadInput) {
  Env env;
  auto bad = [&](const std::vector<std::string>& args) {
    EXPECT_THROW(load_serve_config(args, env.fn(), nullptr), InvalidArgument) << args[0];
  };
  bad({"--port", "99999"});
  bad({"--port", "80x"});
  bad({"--no-such-flag"});
  bad({"--max-concurrency", "0"});
  bad({"--port"});
  bad({"positional"});
  bad({"--log-requests=maybe"});
  bad({"--config", "/no/such/file.yaml"});
  bad({"--config", write_file("bad.yaml", "port: [1, 2\n")});
  bad({"--config", write_file("unknown.yaml", "colour: blue\n")});
  bad({"--config", write_file("list.yaml", "- a\n- b\n")});
  env.vars = {{"TACHYON_PORT", "eighty"}};
  bad({"--host", "x"});
}

TEST(ServeConfig, KvCacheSizeInMibOrBytes) {
  EXPECT_EQ(load({"--kv-cache-bytes", "3145728"}).kv_cache_bytes, 3145728);
  EXPECT_EQ(load({"--kv-cache-mb", "3"}).kv_cache_bytes, 3145728);
  Env env;
  env.vars = {{"TACHYON_KV_CACHE_BYTES", "1048576"}};
  EXPECT_EQ(load({}, env).kv_cache_bytes, 1048576);
  EXPECT_EQ(load({"--max_concurrency", "3"}).max_concurrency, 3);  // _ for - as in the file
}

TEST(ServeConfig, HelpListsEverySetting) {
  std::string help;
  EXPECT_FALSE(load_serve_config({"--help"}, Env().fn(), &help).has_value());
  for (const char* s :
       {"--model", "CHECKPOINT_PATH", "START_PORT", "CONCURRENCY_LIMIT", "--max-queued-requests",
        "--api-key", "--config", "MAX_SEQ_LEN", "TOKENIZER_PATH", "MODEL_TYPE"})
    EXPECT_NE(help.find(s), std::string::npos) << s;
}

}  // namespace
}  // namespace tachyon::server
