// tachyon make-random: a checkpoint with random weights for any config.json.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/quant_writer.h"
#include "model/random_model.h"

namespace tachyon::cli {

int cmd_make_random(const CommandArgs& argv) {
  const auto settings = parse_command(
      "make-random", argv,
      "usage: tachyon make-random --config CONFIG.json --out DIR [--dtype bf16] [--seed S]\n"
      "                           [--quant-format gptq|awq|fp8] [--lora-rank R]\n\n"
      "Writes a checkpoint with random weights for a model's config.json; with\n"
      "--quant-format, its decoder linears quantized into that format; with --lora-rank R,\n"
      "a random PEFT LoRA adapter of rank R for that model instead.\n");
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
  const std::string format = args.str("quant-format");
  auto t0 = std::chrono::steady_clock::now();
  uint64_t params = 0;
  if (const int64_t rank = args.integer("lora-rank"); rank > 0) {
    if (format != "none")
      raise<InvalidArgument>("--lora-rank writes an adapter: no --quant-format");
    params = write_random_lora(config, out, static_cast<int32_t>(rank), opts);
  } else if (format == "none") {
    params = write_random_model(config, out, opts);
  } else {
    // The dense model beside the output, quantized into it, then removed.
    const std::string dense = out + ".dense";
    params = write_random_model(config, dense, opts);
    try {
      quantize_model(dense, out, *quant_format_spec(format));  // one of the choices
    } catch (...) {
      std::filesystem::remove_all(dense);
      throw;
    }
    std::filesystem::remove_all(dense);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %llu parameters (%s) to %s in %.2f s\n",
               static_cast<unsigned long long>(params),
               format == "none" ? dtype.c_str() : format.c_str(), out.c_str(), s);
  return 0;
}

}  // namespace tachyon::cli
