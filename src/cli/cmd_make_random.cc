// tachyon make-random: a checkpoint with random weights for any config.json.
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/random_model.h"

namespace tachyon::cli {

int cmd_make_random(const CommandArgs& argv) {
  const auto settings = parse_command(
      "make-random", argv,
      "usage: tachyon make-random --config CONFIG.json --out DIR [--dtype bf16] [--seed S]\n\n"
      "Writes a checkpoint with random weights for a model's config.json.\n");
  if (!settings) return 0;
  const SettingValues& args = *settings;
  RandomModelOptions opts;
  const std::string dtype = args.str("weight-dtype");
  opts.dtype = *parse_dtype(dtype);  // one of the setting's choices
  opts.seed = static_cast<uint64_t>(args.integer("seed"));
  opts.shard_bytes = static_cast<uint64_t>(args.integer("shard-mib")) << 20;
  const std::string out = args.str("out");
  const std::string config = args.str("model-config");
  if (config.empty() || out.empty())
    raise<InvalidArgument>("give --config CONFIG.json and --out DIR");
  auto t0 = std::chrono::steady_clock::now();
  const uint64_t params = write_random_model(config, out, opts);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %llu parameters (%s) to %s in %.2f s\n",
               static_cast<unsigned long long>(params), dtype.c_str(), out.c_str(), s);
  return 0;
}

}  // namespace tachyon::cli
