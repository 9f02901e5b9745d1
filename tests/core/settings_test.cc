#include "core/settings.h"
#include "core/fake_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"

namespace tachyon {
namespace {

using Env = ::tachyon::testing::FakeEnv;

SettingValues parse(std::string_view command, const std::vector<std::string>& args,
                    const Env& env = {}) {
  auto v = parse_settings(command, args, env.fn());
  EXPECT_TRUE(v.has_value());
  return v ? *v : SettingValues(std::string(command));
}

// The message of the InvalidArgument that parsing throws ("" when none).
std::string error_of(std::string_view command, const std::vector<std::string>& args,
                     const Env& env = {}) {
  try {
    parse_settings(command, args, env.fn());
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

const std::vector<std::string> kCommands = {
    "serve",       "generate",      "bench",          "tokenize",   "inspect",
    "make-random", "bench-serving", "bench-overhead", "perplexity", "quantize"};

TEST(Settings, FlagForms) {
  EXPECT_EQ(parse("serve", {"--port", "1"}).integer("port"), 1);
  EXPECT_EQ(parse("serve", {"--port=2"}).integer("port"), 2);
  EXPECT_EQ(parse("serve", {"--max_concurrency", "3"}).integer("max-concurrency"), 3);
  EXPECT_EQ(parse("serve", {"--max_concurrency=4"}).integer("max-concurrency"), 4);
  EXPECT_EQ(parse("serve", {"--port", "1", "--port", "5"}).integer("port"), 5);  // last wins
  EXPECT_EQ(parse("serve", {"--port", "-0"}).integer("port"), 0);
  EXPECT_EQ(parse("serve", {"--host", "--weird"}).str("host"), "--weird");  // a value
  // Booleans: alone, with a word after them, with =, negated.
  EXPECT_TRUE(parse("serve", {"--log-requests"}).flag("log-requests"));
  EXPECT_FALSE(parse("serve", {"--progress", "false", "--port", "1"}).flag("progress"));
  EXPECT_EQ(parse("serve", {"--progress", "off", "--port", "1"}).integer("port"), 1);
  EXPECT_FALSE(parse("serve", {"--progress=false"}).flag("progress"));
  EXPECT_FALSE(parse("serve", {"--no-progress"}).flag("progress"));
  EXPECT_FALSE(parse("serve", {"--no_progress"}).flag("progress"));
  EXPECT_TRUE(parse("serve", {"--no-progress", "--progress"}).flag("progress"));
  EXPECT_FALSE(parse("generate", {"--overlap-steps", "off"}).flag("overlap-steps"));
  EXPECT_TRUE(parse("generate", {"--overlap-steps=on"}).flag("overlap-steps"));
  EXPECT_FALSE(parse("tokenize", {"--no-special-tokens"}).flag("special-tokens"));
  // Lists: repeated flags.
  EXPECT_EQ(parse("serve", {"--api-key", "a", "--api-key=b"}).list("api-key"),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(parse("serve", {}).list("api-key").empty());
  // A multi-value list takes the arguments up to the next flag; --a=v takes one; others
  // take one value per flag.
  EXPECT_EQ(parse("serve", {"--lora-modules", "a=/x", "b=/y", "--port", "1"}).list("lora"),
            (std::vector<std::string>{"a=/x", "b=/y"}));
  EXPECT_NE(error_of("serve", {"--lora=a=/x", "b=/y"}).find("unexpected argument 'b=/y'"),
            std::string::npos);
  EXPECT_NE(error_of("serve", {"--api-key", "a", "b"}).find("unexpected argument 'b'"),
            std::string::npos);
  EXPECT_FALSE(parse_settings("serve", {"--port", "1", "--help"}, Env{}.fn()).has_value());
  EXPECT_FALSE(parse_settings("bench", {"-h"}, Env{}.fn()).has_value());
}

TEST(Settings, OneNameForOneSettingInEveryCommand) {
  // The KV cache size: MiB under its canonical name, bytes under the older spelling.
  for (const char* cmd : {"serve", "generate", "bench"}) {
    EXPECT_DOUBLE_EQ(parse(cmd, {"--kv-cache-mb", "1.5"}).number("kv-cache-mb"), 1.5) << cmd;
    EXPECT_DOUBLE_EQ(parse(cmd, {"--kv-cache-bytes", "3145728"}).number("kv-cache-mb"), 3) << cmd;
    EXPECT_EQ(parse(cmd, {"--max-batch-tokens", "64"}).integer("max-num-batched-tokens"), 64);
    EXPECT_EQ(parse(cmd, {"--max-num-batched-tokens", "65"}).integer("max-num-batched-tokens"), 65);
    EXPECT_DOUBLE_EQ(parse(cmd, {"--gpu-memory-utilization", "0.5"}).number("gpu-memory-fraction"),
                     0.5);
  }
  Env env;
  env.vars = {{"TACHYON_KV_CACHE_BYTES", "1048576"}};
  EXPECT_DOUBLE_EQ(parse("generate", {}, env).number("kv-cache-mb"), 1);
  env.vars = {{"KV_CACHE_MEM_MB", "7"}};
  EXPECT_DOUBLE_EQ(parse("serve", {}, env).number("kv-cache-mb"), 7);
  // Per-command spellings: bench-serving's --model is the served name, make-random's
  // --config and --dtype are the model's config.json and its weights' type.
  EXPECT_EQ(parse("bench-serving", {"--model", "m"}).str("served-model-name"), "m");
  EXPECT_EQ(parse("serve", {"--model", "/d"}).str("model"), "/d");
  SettingValues mr = parse("make-random", {"--config", "c.json", "--dtype", "f16", "--out", "o"});
  EXPECT_EQ(mr.str("model-config"), "c.json");
  EXPECT_EQ(mr.str("weight-dtype"), "f16");
  EXPECT_EQ(parse("bench", {"--max-concurrency", "3"}).integer("concurrency"), 3);
}

TEST(Settings, PrecedenceFlagThenEnvironmentThenFileThenDefault) {
  const std::string file =
      write_file("settings.yaml",
                 "port: 7000\nmax_concurrency: 5\nhost: 0.0.0.0\n"
                 "api-key: [a, b]\nlog_requests: true\nkv-cache-bytes: 2097152\n");
  Env env;
  env.vars = {{"START_PORT", "7100"}, {"TACHYON_PORT", "7200"}, {"CONCURRENCY_LIMIT", "9"}};
  SettingValues v = parse("serve", {"--config", file, "--port=7300"}, env);
  EXPECT_EQ(v.integer("port"), 7300);
  EXPECT_EQ(v.source("port"), "--port");
  EXPECT_EQ(v.integer("max-concurrency"), 9);
  EXPECT_EQ(v.source("max-concurrency"), "CONCURRENCY_LIMIT");
  EXPECT_EQ(v.str("host"), "0.0.0.0");
  EXPECT_EQ(v.source("host"), "--config " + file + ": host");
  EXPECT_EQ(v.list("api-key"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(v.flag("log-requests"));
  EXPECT_DOUBLE_EQ(v.number("kv-cache-mb"), 2);
  EXPECT_EQ(v.integer("max-n"), 16);
  EXPECT_EQ(v.source("max-n"), "default");
  EXPECT_FALSE(v.given("max-n"));
  EXPECT_EQ(parse("serve", {"--config", file}, env).integer("port"), 7200);  // TACHYON_ first
  env.vars.erase("TACHYON_PORT");
  EXPECT_EQ(parse("serve", {"--config", file}, env).integer("port"), 7100);
  env.vars.erase("START_PORT");
  EXPECT_EQ(parse("serve", {"--config", file}, env).integer("port"), 7000);
  env.vars = {{"TACHYON_CONFIG", file}};
  EXPECT_EQ(parse("serve", {}, env).integer("port"), 7000);
  // JSON is YAML too; the same file format serves generate.
  const std::string json = write_file("settings.json", R"({"max_new_tokens": 3, "seed": 9})");
  SettingValues g = parse("generate", {"--config", json, "--seed", "4"});
  EXPECT_EQ(g.integer("max-new-tokens"), 3);
  EXPECT_EQ(g.integer("seed"), 4);
  env.vars = {{"TACHYON_API_KEY", "x,y"}};
  EXPECT_EQ(parse("serve", {}, env).list("api-key"), (std::vector<std::string>{"x", "y"}));
  // A JSON value is one item: its commas are its own.
  env.vars = {{"LORA_INFO", R"( {"a": "/x", "b": "/y"})"}};
  EXPECT_EQ(parse("serve", {}, env).list("lora"),
            (std::vector<std::string>{R"( {"a": "/x", "b": "/y"})"}));
  // Per-command defaults.
  EXPECT_EQ(parse("bench", {}).integer("num-requests"), 64);
  EXPECT_EQ(parse("bench-serving", {}).integer("num-requests"), 200);
  EXPECT_EQ(parse("bench-overhead", {}).integer("output-len"), 4);
}

TEST(Settings, ErrorsNameTheFlagAndChangeNothing) {
  std::string e = error_of("serve", {"--max-num-seq", "4"});
  EXPECT_NE(e.find("unknown flag --max-num-seq "), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean --max-num-seqs?"), std::string::npos) << e;
  e = error_of("generate", {"--promt", "x"});
  EXPECT_NE(e.find("did you mean --prompt?"), std::string::npos) << e;
  e = error_of("generate", {"--zzzzzzzzzzzz"});
  EXPECT_NE(e.find("unknown flag --zzzzzzzzzzzz"), std::string::npos) << e;
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
  e = error_of("generate", {"--port", "1"});  // serve's, not generate's
  EXPECT_NE(e.find("unknown flag --port for 'generate'"), std::string::npos) << e;
  e = error_of("serve", {"--port", "99999"});
  EXPECT_NE(e.find("--port: 99999 is out of range [0, 65535]"), std::string::npos) << e;
  e = error_of("serve", {"--gpu-memory-fraction=1.5"});
  EXPECT_NE(e.find("--gpu-memory-fraction: 1.5 is out of range"), std::string::npos) << e;
  e = error_of("serve", {"--max_n", "0"});
  EXPECT_NE(e.find("--max_n: 0 is out of range"), std::string::npos) << e;
  e = error_of("serve", {"--port", "80x"});
  EXPECT_NE(e.find("--port: '80x' is not an integer"), std::string::npos) << e;
  e = error_of("bench-serving", {"--endpoint", "/v2"});
  EXPECT_NE(e.find("--endpoint: '/v2' is not one of /v1/completions"), std::string::npos) << e;
  Env env;
  env.vars = {{"TACHYON_PORT", "eighty"}};
  e = error_of("serve", {"--host", "x"}, env);
  EXPECT_NE(e.find("TACHYON_PORT: 'eighty' is not an integer"), std::string::npos) << e;
  env.vars = {{"TACHYON_NUM_THREADS", " 4"}};
  EXPECT_NE(error_of("generate", {}, env), "");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--port"},
           {"positional"},
           {"--"},
           {"--log-requests=maybe"},
           {"--no-port"},
           {"--no-progress=true"},
           {"--swap-space", "-1"},
           {"--kv-cache-mb", "nan"},
           {"--config", "/no/such/file.yaml"},
           {"--config", write_file("bad.yaml", "port: [1, 2\n")},
           {"--config", write_file("unknown.yaml", "colour: blue\n")},
           {"--config", write_file("list.yaml", "- a\n- b\n")},
           {"--config", write_file("nested.yaml", "port: {a: 1}\n")},
           {"--config", write_file("two.yaml", "port: [1, 2]\n")},
           {"--config", write_file("range.yaml", "port: 70000\n")},
           {"--config", write_file("generate_only.yaml", "prompt: hi\n")},
       })
    EXPECT_NE(error_of("serve", args), "") << args[0] << (args.size() > 1 ? " " + args[1] : "");
  EXPECT_NE(error_of("make-random", {"--shard-mib", "0"}), "");
  EXPECT_NE(error_of("make-random", {"--dtype", "f8"}), "");
  // A required value read without one.
  SettingValues v = parse("bench", {});
  EXPECT_FALSE(v.has("concurrency"));
  EXPECT_THROW(v.integer("concurrency"), InvalidArgument);
  EXPECT_THROW(v.given("port"), Internal);  // bench does not take --port
}

TEST(Settings, TableIsConsistent) {
  std::set<std::string> vars;
  for (const Setting& s : settings_table()) {
    for (const SettingName& v : s.env) {
      EXPECT_TRUE(vars.insert(v.name).second) << v.name << " names two settings";
    }
    if (s.commands.empty()) {
      EXPECT_FALSE(s.env.empty()) << s.name << " cannot be set";
    }
    if (!s.env.empty() && s.env[0].name.rfind("TACHYON_", 0) != 0)
      ADD_FAILURE() << s.name << ": TACHYON_* comes first";
    for (const std::string& cmd : s.commands)
      EXPECT_NE(std::find(kCommands.begin(), kCommands.end(), cmd), kCommands.end()) << cmd;
    std::vector<std::string> commands = s.commands;
    if (commands.empty()) commands.push_back("");
    for (const std::string& cmd : commands) {
      const std::string def = s.default_for(cmd);
      if (!def.empty() && s.type != SettingType::kList) {
        EXPECT_EQ(check_setting_value(s, def, s.name), def) << s.name << " in " << cmd;
      }
    }
  }
  for (const std::string& cmd : kCommands) {
    std::set<std::string> names;
    for (const Setting& s : settings_table()) {
      if (!s.takes(cmd)) continue;
      EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice in " << cmd;
    }
    std::set<std::string> aliases;
    for (const Setting& s : settings_table()) {
      if (!s.takes(cmd)) continue;
      for (const SettingName& a : s.aliases) {
        if (!names.count(a.name)) {
          EXPECT_TRUE(aliases.insert(a.name).second) << a.name << " twice in " << cmd;
        }
      }
    }
  }
}

TEST(Settings, HelpListsEverySettingOfTheCommand) {
  for (const std::string& cmd : kCommands) {
    const std::string help = settings_help(cmd, "usage: tachyon " + cmd);
    for (const Setting& s : settings_table()) {
      // The flag, then a space or (a long one) the end of its line.
      const std::string flag = (s.type == SettingType::kBool ? "--[no-]" : "--") + s.name;
      const bool listed =
          help.find(flag + " ") != std::string::npos || help.find(flag + "\n") != std::string::npos;
      if (!s.takes(cmd)) {
        EXPECT_FALSE(listed) << cmd << ": " << s.name;
        continue;
      }
      EXPECT_TRUE(listed) << cmd << ": " << s.name;
      for (const SettingName& v : s.env) EXPECT_NE(help.find(v.name), std::string::npos) << v.name;
      const std::string def = s.default_for(cmd);
      EXPECT_NE(help.find("default " + (def.empty() ? std::string("none") : def)),
                std::string::npos)
          << cmd << ": " << s.name;
    }
  }
  const std::string serve = settings_help("serve", "usage");
  EXPECT_NE(serve.find("also --kv-cache-bytes"), std::string::npos);
  EXPECT_EQ(serve.find("also --model"), std::string::npos);  // serve's --model is the model
  EXPECT_NE(settings_help("bench-serving", "usage").find("also --model"), std::string::npos);
  // make-random's --config is the model's config.json, not a settings file.
  EXPECT_NE(serve.find("settings file named by --config"), std::string::npos);
  const std::string mr = settings_help("make-random", "usage");
  EXPECT_EQ(mr.find("settings file"), std::string::npos);
  EXPECT_NE(mr.find("also --config"), std::string::npos);
  const std::string main = main_help();
  for (const auto& [name, line] : subcommands()) EXPECT_NE(main.find(name), std::string::npos);
  for (const char* v :
       {"TACHYON_CPU_ISA", "TACHYON_GRAPHS", "TACHYON_HOME", "TACHYON_CPU_PORTABLE"})
    EXPECT_NE(main.find(v), std::string::npos) << v;
}

TEST(Settings, LibrarySettingsReadTheEnvironmentOnce) {
  setenv("TACHYON_HOME", "/first", 1);
  EXPECT_EQ(setting_env("home"), "/first");
  setenv("TACHYON_HOME", "/second", 1);
  EXPECT_EQ(setting_env("home"), "/first");
  EXPECT_EQ(setting_env_str("home"), "/first");
  unsetenv("TACHYON_HOME");
  EXPECT_THROW(setting_env("no-such-setting"), Internal);
}

}  // namespace
}  // namespace tachyon
