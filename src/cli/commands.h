// The subcommands of the `tachyon` binary. Each takes the arguments after its name
// and returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace tachyon::cli {

using CommandArgs = std::vector<std::string>;

int cmd_version(const CommandArgs& args);
int cmd_tokenize(const CommandArgs& args);
int cmd_generate(const CommandArgs& args);
int cmd_inspect(const CommandArgs& args);
int cmd_make_random(const CommandArgs& args);
int cmd_quantize(const CommandArgs& args);
int cmd_serve(const CommandArgs& args);
int cmd_bench_serving(const CommandArgs& args);
int cmd_bench(const CommandArgs& args);
int cmd_perplexity(const CommandArgs& args);

}  // namespace tachyon::cli
