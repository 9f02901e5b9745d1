#include "model/loader.h"

#include "backend/ops.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/mmap.h"
#include "core/settings.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/lora_adapter.h"
#include "model/megatron.h"
#include "model/registry.h"
#include "model/vision/clip_weights.h"

#include <chrono>
#include <cstdlib>

#if defined(TACHYON_WITH_CUDA)
#include "model/cuda_module.h"
#endif

namespace tachyon {

namespace {
// A Megatron-LM checkpoint's shapes come from its own arguments.
void refuse_sparse_config(const std::string& dir, const LoadOptions& opts) {
  if (!opts.sparse_config.empty())
    raise<InvalidArgument>(
        "{}: a sparse config ({}) applies to a Hugging Face folder, not a "
        "Megatron-LM checkpoint",
        dir, opts.sparse_config);
}

std::string join_path(const std::string& dir, const char* name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}
}  // namespace

ModelConfig load_model_config(const std::string& dir, const LoadOptions& opts) {
  const std::string path = join_path(dir, "config.json");
  if (is_megatron_checkpoint(dir)) {
    refuse_sparse_config(dir, opts);
    return load_megatron_config(dir, opts.vocab_size);
  }
  if (!file_exists(path)) raise<NotFound>("no config.json in model folder '{}'", dir);
  HfConfig cfg = HfConfig::load(path);
  return map_model_config(cfg, opts.model_type, join_path(dir, "generation_config.json"),
                          join_path(dir, "quantize_config.json"), opts.sparse_config);
}

bool cuda_available() {
#if defined(TACHYON_WITH_CUDA)
  const CudaEntry* cuda = probe_cuda_entry();
  return cuda && cuda->device_count() > 0;
#else
  return false;
#endif
}

Device parse_device(const std::string& spec) {
  if (spec == "cpu") return Device{};
  if (spec.empty() || spec == "auto")
    return cuda_available() ? Device{DeviceType::kCUDA, 0} : Device{};
  int index = 0;
  if (spec == "cuda" || spec == "gpu") {
    index = 0;
  } else if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5 && spec.size() < 9 &&
             spec.find_first_not_of("0123456789", 5) == std::string::npos) {
    index = std::atoi(spec.c_str() + 5);
  } else {
    raise<InvalidArgument>("unknown device '{}' (cpu, cuda, cuda:N, auto)", spec);
  }
#if defined(TACHYON_WITH_CUDA)
  const int n = cuda_entry().device_count();
  if (index >= n)
    raise<Unavailable>("device '{}' asked for, but {} CUDA device(s) are visible", spec, n);
  return Device{DeviceType::kCUDA, index};
#else
  raise<Unavailable>("device '{}' (CUDA {}) asked for, but this build has no CUDA backend", spec,
                     index);
#endif
}

Device default_device() {
  return parse_device(setting_env("device").value_or(std::string()));
}

namespace {

// checkpoint_dtype: the config's torch_dtype.
std::unique_ptr<Backend> make_backend(const LoadOptions& opts, DType checkpoint_dtype) {
  const Device dev = opts.device ? *opts.device : default_device();
  std::optional<DType> kv = opts.kv_cache_dtype;
  if (!kv)
    if (auto env = setting_env("kv-cache-dtype")) kv = parse_kv_cache_dtype(*env);
  if (!kv) {
    // RTP-LLM's switches: INT8_KV_CACHE=1, FP8_KV_CACHE=1.
    const bool int8 = setting_env_bool("int8-kv-cache"), fp8 = setting_env_bool("fp8-kv-cache");
    if (int8 && fp8)
      raise<InvalidArgument>("INT8_KV_CACHE and FP8_KV_CACHE are both set; choose one");
    if (int8) kv = DType::kI8;
    if (fp8) kv = DType::kF8E4M3;
  }
  if (dev.is_cpu()) return make_cpu_backend(kv.value_or(DType::kF32));
#if defined(TACHYON_WITH_CUDA)
  DType dtype = default_gpu_dtype(checkpoint_dtype);
  if (opts.dtype) {
    dtype = *opts.dtype;
  } else if (auto env = setting_env("dtype")) {
    auto parsed = parse_dtype(*env);
    if (!parsed) raise<InvalidArgument>("TACHYON_DTYPE: unknown dtype '{}'", *env);
    dtype = *parsed;
  }
  CudaBackendOptions o;
  o.device = dev.index;
  o.dtype = dtype;
  o.kv_dtype = kv;
  return cuda_entry().make_backend(o);
#else
  (void)checkpoint_dtype;
  raise<Unavailable>("device {} asked for, but this build has no CUDA backend", dev.str());
#endif
}

}  // namespace

DType default_gpu_dtype(DType checkpoint_dtype) {
  // f16 weights stay exact in f16; bf16 would drop three bits of each.
  return checkpoint_dtype == DType::kF16 ? DType::kF16 : DType::kBF16;
}

std::optional<DType> parse_compute_dtype(const std::string& spec) {
  if (spec.empty() || spec == "auto") return std::nullopt;
  const std::optional<DType> d = parse_dtype(spec);
  if (!d || (*d != DType::kBF16 && *d != DType::kF16 && *d != DType::kF32))
    raise<InvalidArgument>("dtype '{}' is not one of auto, bf16, f16, f32", spec);
  return d;
}

std::optional<DType> parse_kv_cache_dtype(const std::string& spec) {
  if (spec.empty() || spec == "auto") return std::nullopt;
  if (spec == "fp8" || spec == "fp8_e4m3" || spec == "f8_e4m3") return DType::kF8E4M3;
  if (spec == "bf16" || spec == "bfloat16") return DType::kBF16;
  if (spec == "int8" || spec == "i8") return DType::kI8;
  raise<InvalidArgument>(
      "KV cache dtype '{}' is not one of auto, bf16 (bfloat16), int8, fp8 (fp8_e4m3)", spec);
}

int64_t kv_cache_budget_bytes(Model& model, double memory_fraction, int32_t max_batched_tokens) {
  if (!(memory_fraction > 0 && memory_fraction <= 1))
    raise<InvalidArgument>("memory fraction {} not in (0, 1]", memory_fraction);
  const Backend::MemoryInfo mem = model.backend().memory_info();
  if (mem.total_bytes <= 0) return 0;
  const int64_t used = mem.total_bytes - mem.free_bytes;
  const int64_t workspace = static_cast<int64_t>(model.workspace_bytes(max_batched_tokens));
  const int64_t budget =
      static_cast<int64_t>(memory_fraction * static_cast<double>(mem.total_bytes)) - used -
      workspace;
  if (budget <= 0)
    raise<ResourceExhausted>(
        "no device memory left for the KV cache: {:.2f} GiB of {:.2f} GiB in use, {:.2f} GiB "
        "of workspace, fraction {}",
        used / double(1 << 30), mem.total_bytes / double(1 << 30), workspace / double(1 << 30),
        memory_fraction);
  return budget;
}

int64_t swap_space_bytes(double gib, bool on_cpu) {
  if (gib < 0) gib = on_cpu ? 0 : kDefaultGpuSwapSpaceGib;
  if (!(gib <= double(1 << 20))) raise<InvalidArgument>("swap space {} GiB is too large", gib);
  return static_cast<int64_t>(gib * double(int64_t{1} << 30));
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts) {
  const std::string path = join_path(dir, "config.json");
  ModelConfig mc;
  std::unique_ptr<Checkpoint> ckpt;
  WeightMap map;
  if (is_megatron_checkpoint(dir)) {
    refuse_sparse_config(dir, opts);
    MegatronModel m = load_megatron(dir, opts.vocab_size);
    mc = std::move(m.config);
    ckpt = std::move(m.checkpoint);
    map = std::move(m.map);
    log_info("{}: Megatron-LM checkpoint, {} layers, vocabulary {}", dir, mc.layer_num,
             mc.vocab_size);
  } else {
    if (!file_exists(path)) raise<NotFound>("no config.json in model folder '{}'", dir);
    HfConfig cfg = HfConfig::load(path);
    const ArchSpec& spec = find_arch(cfg, opts.model_type);
    mc = map_model_config(cfg, opts.model_type, join_path(dir, "generation_config.json"),
                          join_path(dir, "quantize_config.json"), opts.sparse_config);
    if (mc.quant.enabled()) log_info("{}: quantized checkpoint ({})", dir, mc.quant.str());
    ckpt = Checkpoint::open(dir);
    map = spec.map_weights(mc);
  }
  std::unique_ptr<Backend> backend = make_backend(opts, mc.dtype);
  ModelWeights weights = load_weights(*ckpt, mc, map);
  if (!opts.merge_lora.empty()) {
    const LoraAdapter adapter = load_lora_adapter(opts.merge_lora, mc, weights.map, {});
    merge_lora(weights, adapter);
    log_info("merged the LoRA adapter {} ({} modules) into the weights", opts.merge_lora,
             adapter.modules.size());
  }
  std::optional<LoadQuantization> quant = opts.quantization;
  if (!quant)
    if (auto env = setting_env("quantization")) quant = parse_load_quantization(*env);
  if (!quant && setting_env_bool("int8-mode")) quant = LoadQuantization::kInt8;
  if (quant) {
    const auto t0 = std::chrono::steady_clock::now();
    quantize_at_load(weights, *quant, ThreadPool::global());
    log_info("quantized the decoder weights to {} in {:.2f} s", load_quantization_name(*quant),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  log_debug("loaded {} ({}): {} layers, {} parameters", dir, mc.architecture, mc.layer_num,
            weights.total_params);
  auto model = std::make_unique<ModelRunner>(std::move(mc), std::move(weights), std::move(backend));
  if (opts.lora.max_loras > 0) model->enable_lora(opts.lora.max_loras, opts.lora.max_rank);
  if (model->config().vision)
    model->attach_vision(load_vision_weights(*ckpt, *model->config().vision));
  model->backend().synchronize();  // weights are on the device before the checkpoint unmaps
  const Backend::MemoryInfo mem = model->backend().memory_info();
  if (mem.total_bytes > 0)
    log_info("{} memory in use with the weights loaded: {:.2f} GiB of {:.2f} GiB",
             model->backend().device().str(),
             static_cast<double>(mem.total_bytes - mem.free_bytes) / double(1 << 30),
             static_cast<double>(mem.total_bytes) / double(1 << 30));
  return model;
}

}  // namespace tachyon
