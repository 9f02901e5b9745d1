#include "model/loader.h"

#include "backend/ops.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/mmap.h"
#include "io/checkpoint.h"
#include "model/registry.h"

namespace tachyon {

namespace {
std::string join_path(const std::string& dir, const char* name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}
}  // namespace

ModelConfig load_model_config(const std::string& dir, const LoadOptions& opts) {
  const std::string path = join_path(dir, "config.json");
  if (!file_exists(path)) raise<NotFound>("no config.json in model folder '{}'", dir);
  HfConfig cfg = HfConfig::load(path);
  return map_model_config(cfg, opts.model_type, join_path(dir, "generation_config.json"));
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts) {
  if (!opts.device.is_cpu())
    raise<InvalidArgument>("device {} is not supported yet", opts.device.str());
  const std::string path = join_path(dir, "config.json");
  if (!file_exists(path)) raise<NotFound>("no config.json in model folder '{}'", dir);
  HfConfig cfg = HfConfig::load(path);
  const ArchSpec& spec = find_arch(cfg, opts.model_type);
  ModelConfig mc = map_model_config(cfg, opts.model_type, join_path(dir, "generation_config.json"));
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(dir);
  WeightMap map = spec.map_weights(mc);
  ModelWeights weights = load_weights(*ckpt, mc, map);
  log_debug("loaded {} ({}): {} layers, {} parameters", dir, mc.architecture, mc.layer_num,
            weights.total_params);
  return std::make_unique<Decoder>(std::move(mc), std::move(weights), make_cpu_backend());
}

}  // namespace tachyon
