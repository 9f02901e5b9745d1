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

TEST(ServeConfig, ToolCallParserNeedsAutoToolChoice) {
  EXPECT_FALSE(load({}).tool_call_parser);
  EXPECT_EQ(load({"--enable-auto-tool-choice", "--tool-call-parser", "hermes"}).tool_call_parser,
            ToolCallFormat::kHermes);
  EXPECT_EQ(
      load({"--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"}).tool_call_parser,
      ToolCallFormat::kLlama3Json);
  Env env;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--tool-call-parser", "mistral"},
        {"--enable-auto-tool-choice"},
        {"--enable-auto-tool-choice", "--tool-call-parser", "pythonic"}})
    EXPECT_THROW(load_serve_config(args, env.fn(), nullptr), InvalidArgument) << args[0];
}

TEST(ServeConfig, MediaSources) {
  ServeConfig c = load({});
  EXPECT_TRUE(c.allowed_media_domains.empty());
  EXPECT_TRUE(c.allowed_local_media_path.empty());
  EXPECT_EQ(c.media_fetch_timeout_s, 5);
  EXPECT_EQ(c.max_image_bytes, 32 << 20);
  EXPECT_EQ(c.max_image_pixels, 64'000'000);
  c = load({"--allowed-media-domains", "a.example", "--allowed-media-domains", "b.example",
            "--allowed-local-media-path", "/data/images", "--max-image-pixels", "1000000"});
  EXPECT_EQ(c.allowed_media_domains, (std::vector<std::string>{"a.example", "b.example"}));
  EXPECT_EQ(c.allowed_local_media_path, "/data/images");
  EXPECT_EQ(c.max_image_pixels, 1'000'000);
  Env env;
  env.vars = {{"VLLM_IMAGE_FETCH_TIMEOUT", "12"},
              {"TACHYON_ALLOWED_MEDIA_DOMAINS", "x.example,y.example"}};
  c = load({}, env);
  EXPECT_EQ(c.media_fetch_timeout_s, 12);
  EXPECT_EQ(c.allowed_media_domains, (std::vector<std::string>{"x.example", "y.example"}));
  EXPECT_THROW(load_serve_config({"--max-image-bytes", "10"}, Env{}.fn(), nullptr),
               InvalidArgument);
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

TEST(ServeConfig, PrefixCachingFlagsAndAliases) {
  EXPECT_TRUE(load({}).prefix_caching);  // on by default
  EXPECT_FALSE(load({"--no-prefix-caching"}).prefix_caching);
  EXPECT_FALSE(load({"--prefix-caching", "false"}).prefix_caching);
  EXPECT_FALSE(load({"--no-enable-prefix-caching"}).prefix_caching);  // vLLM's spelling
  EXPECT_TRUE(load({"--enable-prefix-caching"}).prefix_caching);
  Env env;
  for (const char* var : {"REUSE_CACHE", "USE_BLOCK_CACHE", "TACHYON_PREFIX_CACHING"}) {
    env.vars = {{var, "0"}};
    EXPECT_FALSE(load({}, env).prefix_caching) << var;
    env.vars = {{var, "1"}};
    EXPECT_TRUE(load({}, env).prefix_caching) << var;
    EXPECT_FALSE(load({"--no-prefix-caching"}, env).prefix_caching) << var;  // the flag wins
  }
  env.vars = {{"REUSE_CACHE", "2"}};
  try {
    load_serve_config({}, env.fn(), nullptr);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("REUSE_CACHE"), std::string::npos) << e.what();
  }
  EXPECT_DOUBLE_EQ(load({}).prefix_cache_host_gib, 0);
  EXPECT_DOUBLE_EQ(load({"--prefix-cache-host-gib", "1.5"}).prefix_cache_host_gib, 1.5);
  EXPECT_DOUBLE_EQ(load({"--kv-offloading-size", "8"}).prefix_cache_host_gib, 8);
  try {
    load_serve_config({"--kv-offloading-size", "-1"}, Env{}.fn(), nullptr);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-offloading-size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_serve_config({"--prefix-cache-host-gib", "lots"}, Env{}.fn(), nullptr),
               InvalidArgument);
}

TEST(ServeConfig, SystemPromptsFromAFileOrInline) {
  EXPECT_TRUE(load({}).task_prompts.empty());
  const std::string file = write_file(
      "tasks.json", R"([{"task_id": 1, "prompt": "A"}, {"task_id": "b", "prompt": "B"}])");
  ServeConfig c = load({"--system-prompts", file});
  ASSERT_EQ(c.task_prompts.size(), 2u);
  EXPECT_EQ(c.task_prompts[0].task_id, "1");
  EXPECT_EQ(c.task_prompts[1].prompt, "B");
  Env env;
  env.vars = {{"MULTI_TASK_PROMPT", file}};
  EXPECT_EQ(load({}, env).task_prompts.size(), 2u);
  env.vars = {{"MULTI_TASK_PROMPT_STR", R"([{"task_id": 7, "prompt": "seven"}])"}};
  c = load({}, env);
  ASSERT_EQ(c.task_prompts.size(), 1u);
  EXPECT_EQ(c.task_prompts[0].task_id, "7");
  EXPECT_EQ(
      load({"--system-prompts-json", R"([{"task_id": 2, "prompt": "x"}])"}).task_prompts.size(),
      1u);
}

TEST(ServeConfig, SystemPromptsErrorsNameTheirSource) {
  auto error = [](const std::vector<std::string>& args, const Env& env) -> std::string {
    try {
      load_serve_config(args, env.fn(), nullptr);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  const std::string file = write_file("tasks_ok.json", R"([{"task_id": 1, "prompt": "A"}])");
  Env both;
  both.vars = {{"MULTI_TASK_PROMPT", file}, {"MULTI_TASK_PROMPT_STR", "[]"}};
  std::string e = error({}, both);
  EXPECT_NE(e.find("task prompts are given twice, by MULTI_TASK_PROMPT and by "
                   "MULTI_TASK_PROMPT_STR"),
            std::string::npos)
      << e;
  e = error({"--system-prompts", file, "--system-prompts-json", "[]"}, Env{});
  EXPECT_NE(e.find("given twice"), std::string::npos) << e;
  Env inline_bad;
  inline_bad.vars = {{"MULTI_TASK_PROMPT_STR",
                      R"([{"task_id": 1, "prompt": "a"}, {"task_id": "1", "prompt": "b"}])"}};
  e = error({}, inline_bad);
  EXPECT_NE(e.find("MULTI_TASK_PROMPT_STR: entry 1 (task_id 1): task_id already given"),
            std::string::npos)
      << e;
  const std::string bad = write_file("tasks_bad.json", R"([{"task_id": 1, "prompt": ""}])");
  e = error({"--system-prompts", bad}, Env{});
  EXPECT_NE(e.find("--system-prompts: " + bad + ": entry 0 (task_id 1): \"prompt\" is empty"),
            std::string::npos)
      << e;
  e = error({"--system-prompts", "/no/such/tasks.json"}, Env{});
  EXPECT_NE(e.find("--system-prompts: "), std::string::npos) << e;
  EXPECT_NE(e.find("/no/such/tasks.json"), std::string::npos) << e;
}

TEST(ServeConfig, HelpListsEverySetting) {
  std::string help;
  EXPECT_FALSE(load_serve_config({"--help"}, Env().fn(), &help).has_value());
  for (const char* s : {"--model",
                        "CHECKPOINT_PATH",
                        "START_PORT",
                        "CONCURRENCY_LIMIT",
                        "--max-queued-requests",
                        "--api-key",
                        "--config",
                        "MAX_SEQ_LEN",
                        "TOKENIZER_PATH",
                        "MODEL_TYPE",
                        "--[no-]prefix-caching",
                        "--enable-prefix-caching",
                        "REUSE_CACHE",
                        "USE_BLOCK_CACHE",
                        "--prefix-cache-host-gib",
                        "--kv-offloading-size",
                        "--system-prompts",
                        "MULTI_TASK_PROMPT",
                        "--system-prompts-json",
                        "MULTI_TASK_PROMPT_STR"})
    EXPECT_NE(help.find(s), std::string::npos) << s;
}

}  // namespace
}  // namespace tachyon::server
