// tachyon inspect: the mapped ModelConfig and where every weight slot comes from.
#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_dir.h"
#include "core/json.h"
#include "io/checkpoint.h"
#include "model/loader.h"
#include "model/megatron.h"
#include "model/registry.h"

namespace tachyon::cli {
namespace {

// The loaded weights' bytes per storage type ("bf16", "int4 g128 sym", ...).
std::map<std::string, uint64_t> bytes_by_storage(const ModelWeights& w) {
  std::map<std::string, uint64_t> out;
  for (const auto& r : w.records) out[r.storage] += r.bytes;
  return out;
}

}  // namespace

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
  opts.sparse_config = args.str("sparse-config");
  // The checkpoint read as the loader reads it, on no device (a quantized module shows
  // its storage whatever the backends support).
  ModelConfig cfg;
  std::unique_ptr<Checkpoint> ckpt;
  WeightMap map;
  if (is_megatron_checkpoint(dir)) {
    MegatronModel m = load_megatron(dir);  // the padded vocabulary (no tokenizer here)
    cfg = std::move(m.config);
    ckpt = std::move(m.checkpoint);
    map = std::move(m.map);
  } else {
    cfg = load_model_config(dir, opts);
    ckpt = Checkpoint::open(dir);
    map = find_arch(HfConfig::load(dir + "/config.json"), opts.model_type).map_weights(cfg);
  }
  const ModelWeights w = load_weights(*ckpt, cfg, map);
  const bool tied = w.lm_head.w.raw() == w.embedding.raw();
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
                         {"transform", r.transform},
                         {"storage", r.storage},
                         {"bytes", r.bytes}});
    j["weights"] = weights;
    j["total_params"] = w.total_params;
    j["total_bytes"] = w.total_bytes;
    j["bytes_by_storage"] = bytes_by_storage(w);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s\n", dir.c_str());
  std::printf("config:\n%s\n\nweights:\n", cfg.to_json().dump(2).c_str());
  for (const auto& r : w.records) {
    std::string line =
        fmt::format("  {:<40} {:<60} {:<5} {}", r.slot, r.tensor, r.storage, shape_str(r.shape));
    if (!r.transform.empty()) line += "  (" + r.transform + ")";
    std::printf("%s\n", line.c_str());
  }
  if (tied) std::printf("  %-40s (tied to the embedding)\n", "lm_head");
  std::printf("\nbytes by storage type:\n");
  for (const auto& [storage, bytes] : bytes_by_storage(w))
    std::printf("  %-40s %.1f MiB\n", storage.c_str(), static_cast<double>(bytes) / (1 << 20));
  std::printf("\ntotal: %llu parameters, %.1f MiB\n",
              static_cast<unsigned long long>(w.total_params),
              static_cast<double>(w.total_bytes) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace tachyon::cli
