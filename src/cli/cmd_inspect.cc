// tachyon inspect: the mapped ModelConfig and where every weight slot comes from.
#include <fmt/format.h>

#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_dir.h"
#include "core/json.h"
#include "model/loader.h"

namespace tachyon::cli {

int cmd_inspect(const CommandArgs& argv) {
  const auto parsed = parse_command("inspect", argv,
                                    "usage: tachyon inspect [--model DIR] [--json]\n\n"
                                    "Shows the model's mapped config and where every weight "
                                    "slot comes from.\n");
  if (!parsed) return 0;
  const SettingValues& args = *parsed;
  const std::string dir = resolve_model_dir(args.str("model"));
  LoadOptions opts;
  opts.model_type = args.str("model-type");
  std::unique_ptr<Model> model = load_model(dir, opts);
  const ModelConfig& cfg = model->config();
  const ModelWeights& w = model->weights();
  if (args.flag("json")) {
    Json j;
    j["model"] = dir;
    j["config"] = cfg.to_json();
    Json weights = Json::array();
    for (const auto& r : w.records)
      weights.push_back({{"slot", r.slot},
                         {"tensor", r.tensor},
                         {"dtype", dtype_name(r.dtype)},
                         {"shape", r.shape},
                         {"transform", r.transform}});
    j["weights"] = weights;
    j["total_params"] = w.total_params;
    j["total_bytes"] = w.total_bytes;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s\n", dir.c_str());
  std::printf("config:\n%s\n\nweights:\n", cfg.to_json().dump(2).c_str());
  for (const auto& r : w.records) {
    std::string line = fmt::format("  {:<40} {:<60} {:<5} {}", r.slot, r.tensor,
                                   dtype_name(r.dtype), shape_str(r.shape));
    if (!r.transform.empty()) line += "  (" + r.transform + ")";
    std::printf("%s\n", line.c_str());
  }
  if (w.tied_lm_head) std::printf("  %-40s (tied to the embedding)\n", "lm_head");
  std::printf("\ntotal: %llu parameters, %.1f MiB\n",
              static_cast<unsigned long long>(w.total_params),
              static_cast<double>(w.total_bytes) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace tachyon::cli
