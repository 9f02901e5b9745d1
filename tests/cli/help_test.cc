// `tachyon --help` and every subcommand's --help / -h, and flag errors, run as the real
// binary: each help lists every setting the command takes (core/settings_table.cc).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "cli/run_command.h"
#include "core/settings.h"

namespace tachyon {
namespace {

const std::string kBin = std::string(TACHYON_BINARY_DIR) + "/tachyon";

// Runs the binary with `args` (stderr into stdout) and `env` (VAR=value ...) added to the
// environment; returns (exit code, output).
std::pair<int, std::string> run(const std::string& args, const std::string& env = "") {
  return testing::run_command(env + " " + kBin + " " + args + " 2>&1 </dev/null");
}

TEST(CliHelp, MainHelpListsTheSubcommands) {
  for (const char* flag : {"--help", "-h", "help"}) {
    const auto [code, out] = run(flag);
    EXPECT_EQ(code, 0) << flag;
    for (const auto& [name, line] : subcommands()) {
      EXPECT_NE(out.find("  " + name + " "), std::string::npos) << name;
      EXPECT_NE(out.find(line), std::string::npos) << line;
    }
    EXPECT_NE(out.find("TACHYON_CPU_ISA"), std::string::npos) << out;  // env-only settings
  }
  EXPECT_EQ(run("").first, 2);
  const auto [code, out] = run("no-such-command");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("unknown command 'no-such-command'"), std::string::npos) << out;
}

TEST(CliHelp, EverySubcommandListsItsSettings) {
  for (const char* cmd : {"serve", "generate", "bench", "tokenize", "inspect", "make-random",
                          "quantize", "bench-serving", "perplexity"}) {
    for (const char* flag : {"--help", "-h"}) {
      const auto [code, out] = run(std::string(cmd) + " " + flag);
      EXPECT_EQ(code, 0) << cmd << " " << flag << "\n" << out;
      EXPECT_EQ(out.rfind("usage: tachyon " + std::string(cmd), 0), 0) << cmd << "\n" << out;
      for (const Setting& s : settings_table()) {
        if (!s.takes(cmd)) continue;
        // A flag is followed by its value's name or the help's column, or (a long one)
        // by the end of its line.
        const std::string flag = (s.type == SettingType::kBool ? "--[no-]" : "--") + s.name;
        EXPECT_TRUE(out.find(flag + " ") != std::string::npos ||
                    out.find(flag + "\n") != std::string::npos)
            << cmd << ": " << s.name;
        for (const SettingName& v : s.env)
          EXPECT_NE(out.find(v.name), std::string::npos) << cmd << ": " << v.name;
      }
    }
  }
  // --help wins over other flags, even bad ones; version too.
  EXPECT_EQ(run("serve --port 99999 --help").first, 0);
  EXPECT_EQ(run("version --help").first, 0);
  // The overhead mode of bench-serving has its own settings.
  const auto [code, out] = run("bench-serving --overhead --help");
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("--threads"), std::string::npos) << out;
}

TEST(CliHelp, BadFlagsFailWithTheFlagNamed) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : {
           Case{"generate --max-new-token 3",
                "unknown flag --max-new-token for 'generate' (did "
                "you mean --max-new-tokens?)"},
           Case{"generate --kv-cache-mb -1", "--kv-cache-mb: -1 is out of range"},
           Case{"bench --num-requests 0", "--num-requests: 0 is out of range"},
           Case{"serve --port 99999", "--port: 99999 is out of range [0, 65535]"},
           Case{"tokenize --jsonl", "missing required flag --tokenizer"},
           Case{"make-random --out /tmp/x", "give --config CONFIG.json and --out DIR"},
           Case{"quantize --out /tmp/x", "give --model IN and --out OUT"},
           Case{"quantize --method int3", "--method: 'int3' is not one of"},
           Case{"make-random --quant-format exl2", "--quant-format: 'exl2' is not one of"},
           Case{"bench-serving --endpoint /v2", "--endpoint: '/v2' is not one of"},
           Case{"version extra", "version takes no arguments"},
       }) {
    const auto [code, out] = run(c.args);
    EXPECT_EQ(code, 1) << c.args << "\n" << out;
    EXPECT_NE(out.find(std::string("error: ") + c.message), std::string::npos) << c.args << "\n"
                                                                               << out;
  }
  // So are the variables the libraries read, before anything loads.
  for (const char* env :
       {"TACHYON_CPU_PORTABLE=maybe", "TACHYON_GRAPHS=2", "TACHYON_CPU_ISA=avx9"}) {
    const auto [code, out] = run("inspect --model /nonexistent", env);
    EXPECT_EQ(code, 1) << env << "\n" << out;
    const std::string var = std::string(env).substr(0, std::string(env).find('='));
    EXPECT_NE(out.find("error: " + var + ": '"), std::string::npos) << out;
  }
  // An environment variable is checked the same way, before anything loads.
  const auto [code, out] =
      run("generate --prompt-ids 1 --model /nonexistent", "TACHYON_MAX_NUM_SEQS=abc");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("error: TACHYON_MAX_NUM_SEQS: 'abc' is not an integer"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace tachyon
