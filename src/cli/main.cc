// tachyon: LLM inference engine and server.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"

namespace tachyon::cli {
namespace {

struct Command {
  const char* name;
  int (*run)(const CommandArgs&);
  const char* help;
};

constexpr Command kCommands[] = {
    {"version", cmd_version, "print the version"},
    {"generate", cmd_generate, "generate tokens from a prompt with a model"},
    {"inspect", cmd_inspect, "show a model's mapped config and weights"},
    {"make-random", cmd_make_random, "write a checkpoint with random weights for a config.json"},
    {"tokenize", cmd_tokenize, "encode/decode with a checkpoint's tokenizer (--jsonl)"},
};

void print_usage() {
  std::fprintf(stderr, "usage: tachyon <command> [flags]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-12s %s\n", c.name, c.help);
}

}  // namespace

int cmd_version(const CommandArgs&) {
  std::printf("tachyon 0.1.0\n");
  return 0;
}

}  // namespace tachyon::cli

int main(int argc, char** argv) {
  using namespace tachyon;
  using namespace tachyon::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  CommandArgs args(argv + 2, argv + argc);
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return e.code() == ErrorCode::kInternal ? 70 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 70;
    }
  }
  std::fprintf(stderr, "unknown command '%s'\n\n", name.c_str());
  print_usage();
  return 2;
}
