// tachyon quantize: a quantized copy of a 16-bit checkpoint (GPTQ int8 / int4, FP8
// blocks) that tachyon and other engines load as they load the hub's.
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/quant_writer.h"

namespace tachyon::cli {

int cmd_quantize(const CommandArgs& argv) {
  const auto settings = parse_command(
      "quantize", argv,
      "usage: tachyon quantize --model IN --out OUT [--method int8|int4|fp8]\n\n"
      "Quantizes every decoder linear weight of a 16-bit checkpoint (not the embeddings,\n"
      "norms, MoE router or lm_head) by rounding to nearest and writes OUT: GPTQ\n"
      "(checkpoint_format gptq) for int8 (per channel, symmetric) and int4 (groups of\n"
      "128, symmetric; per channel where 128 does not divide a row), or the fp8 format\n"
      "with 128x128 block scales; config.json gets its quantization_config and the\n"
      "tokenizer files are copied.\n");
  if (!settings) return 0;
  const SettingValues& args = *settings;
  const std::string in = args.str("model"), out = args.str("out");
  if (in.empty() || out.empty()) raise<InvalidArgument>("give --model IN and --out OUT");
  const std::string method = args.str("method");
  const auto spec = quantize_method_spec(method);
  if (!spec) raise<InvalidArgument>("--method '{}' is not one of int8, int4, fp8", method);
  const auto t0 = std::chrono::steady_clock::now();
  const QuantizeSummary sum = quantize_model(in, out, *spec);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "quantized %llu matrices (%s): %.1f MiB -> %.1f MiB, wrote %s in %.2f s\n",
               static_cast<unsigned long long>(sum.matrices), method.c_str(),
               static_cast<double>(sum.bytes_in) / (1 << 20),
               static_cast<double>(sum.bytes_out) / (1 << 20), out.c_str(), s);
  return 0;
}

}  // namespace tachyon::cli
