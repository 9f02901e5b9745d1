// tachyon: LLM inference engine and server.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/settings.h"

namespace tachyon::cli {
namespace {

struct Command {
  const char* name;
  int (*run)(const CommandArgs&);
};

// The descriptions are in core/settings_table.cc (subcommands()).
constexpr Command kCommands[] = {
    {"version", cmd_version},
    {"tokenize", cmd_tokenize},
    {"generate", cmd_generate},
    {"inspect", cmd_inspect},
    {"make-random", cmd_make_random},
    {"quantize", cmd_quantize},
    {"serve", cmd_serve},
    {"bench-serving", cmd_bench_serving},
    {"bench", cmd_bench},
    {"perplexity", cmd_perplexity},
};

void print_usage(FILE* out) {
  const std::string help = main_help();
  std::fwrite(help.data(), 1, help.size(), out);
}

}  // namespace

int cmd_version(const CommandArgs& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("usage: tachyon version\n\nPrints the version.\n");
    return 0;
  }
  if (!args.empty()) raise<InvalidArgument>("version takes no arguments");
  std::printf("tachyon 0.1.0\n");
  return 0;
}

}  // namespace tachyon::cli

int main(int argc, char** argv) {
  using namespace tachyon;
  using namespace tachyon::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_usage(argc < 2 ? stderr : stdout);
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
  print_usage(stderr);
  return 2;
}
