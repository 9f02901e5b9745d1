// tachyon make-random: a checkpoint with random weights for any config.json.
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/random_model.h"

namespace tachyon::cli {

int cmd_make_random(const CommandArgs& argv) {
  Args args(argv, {"config", "out", "dtype", "seed", "shard-mib"}, {});
  RandomModelOptions opts;
  const std::string dtype = args.get_or("dtype", "bf16");
  auto parsed = parse_dtype(dtype);
  if (!parsed) raise<InvalidArgument>("--dtype: unknown dtype '{}' (f32, f16, bf16)", dtype);
  opts.dtype = *parsed;
  opts.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  const int64_t shard_mib = args.get_int("shard-mib", 2048);
  if (shard_mib <= 0) raise<InvalidArgument>("--shard-mib must be positive");
  opts.shard_bytes = static_cast<uint64_t>(shard_mib) << 20;
  const std::string out = args.require("out");
  auto t0 = std::chrono::steady_clock::now();
  const uint64_t params = write_random_model(args.require("config"), out, opts);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %llu parameters (%s) to %s in %.2f s\n",
               static_cast<unsigned long long>(params), dtype.c_str(), out.c_str(), s);
  return 0;
}

}  // namespace tachyon::cli
