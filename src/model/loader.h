// Loading a Hugging Face model folder through the public path: config.json ->
// registry (config mapping) -> Checkpoint -> weight mapping -> model runner.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "model/load_quantization.h"
#include "model/model_runner.h"

namespace tachyon {

struct LoadOptions {
  std::string model_type;  // override of architectures[0] / model_type (--model-type)
  // Compute dtype on a GPU (--dtype): bf16, f16 or f32; unset: the TACHYON_DTYPE
  // environment variable, else f16 for a checkpoint whose torch_dtype is float16 and
  // bf16 for the others. The CPU computes in f32.
  std::optional<DType> dtype;
  // Where to run (--device); unset: the TACHYON_DEVICE environment variable, else
  // CUDA device 0 when a GPU is present, else the CPU.
  std::optional<Device> device;
  // The KV cache's element type (--kv-cache-dtype): unset, the compute dtype (or the
  // TACHYON_KV_CACHE_DTYPE environment variable); f8_e4m3 on a GPU computing in bf16 or
  // f16 halves the cache's bytes (keys and values rounded to e4m3).
  std::optional<DType> kv_cache_dtype;
  // Quantization of a 16-bit checkpoint's decoder weights at load (--quantization,
  // model/load_quantization.h); unset: the quantization setting's variables
  // (TACHYON_QUANTIZATION, QUANTIZATION, WEIGHT_TYPE; INT8_MODE=1 for int8), else none.
  std::optional<LoadQuantization> quantization;
  // Multi-LoRA: room for adapters of rank up to max_rank, max_loras of them resident on
  // the device at once (ModelRunner::enable_lora); max_loras 0: none.
  struct Lora {
    int32_t max_loras = 0;
    int32_t max_rank = 16;
  } lora;
  // A PEFT LoRA adapter folder folded into the weights at load (static LoRA); empty: none.
  std::string merge_lora;
  // The tokenizer's vocabulary size: a Megatron-LM checkpoint's padded vocabulary (its
  // embedding and output rows) is cut to it; 0 keeps the padded size.
  int64_t vocab_size = 0;
  // A JSON file of per-layer shapes (--sparse-config, SPARSE_CONFIG_FILE) that replaces
  // config.json's layer_head_num / layer_head_num_kv / layer_inter_size; empty: none.
  std::string sparse_config;
};

// "cpu", "cuda", "cuda:N", "gpu" or "auto" (CUDA when a GPU is present). Throws
// InvalidArgument on anything else, Unavailable for CUDA in a build or on a machine
// without it.
Device parse_device(const std::string& spec);
// The compute dtype named by --dtype / TACHYON_DTYPE: "auto" (or empty) leaves it unset
// (on a GPU: f16 for float16 checkpoints, else bf16), else bf16, f16 or f32. Throws
// InvalidArgument on anything else.
std::optional<DType> parse_compute_dtype(const std::string& spec);
// The KV cache dtype named by --kv-cache-dtype / TACHYON_KV_CACHE_DTYPE: "auto" (or
// empty) leaves it unset (the compute dtype), "bf16" / "bfloat16" is bf16, "int8" / "i8"
// is i8 (CPU only), "fp8" / "fp8_e4m3" / "f8_e4m3" is e4m3. Throws
// InvalidArgument on anything else.
std::optional<DType> parse_kv_cache_dtype(const std::string& spec);
// What a GPU computes in when neither --dtype nor TACHYON_DTYPE says: f16 for a
// checkpoint whose torch_dtype is float16, bf16 for the others (bf16, f32).
DType default_gpu_dtype(DType checkpoint_dtype);
// The device LoadOptions{} resolves to: TACHYON_DEVICE, else "auto".
Device default_device();
// Whether this build has the CUDA backend and the machine a CUDA device.
bool cuda_available();

// Bytes the paged KV cache may take on the model's device so that the process uses at
// most memory_fraction of the device's memory: fraction * total - what is in use now
// (weights, ...) - the activation workspace of a step of max_batched_tokens tokens.
// 0 when the device does not report its memory (the CPU: size the cache otherwise).
int64_t kv_cache_budget_bytes(Model& model, double memory_fraction, int32_t max_batched_tokens);

// Swap space for preempted requests' KV blocks (EngineConfig::swap_space_bytes) from a
// size in GiB; gib < 0 picks the default: kDefaultGpuSwapSpaceGib on a GPU, none on the
// CPU (whose cache is host memory already). Throws InvalidArgument past 1 PiB.
inline constexpr double kDefaultGpuSwapSpaceGib = 4;
int64_t swap_space_bytes(double gib, bool on_cpu);

// The mapped config of a model folder (config.json + generation_config.json), or of a
// Megatron-LM checkpoint (model/megatron.h) when the folder has no config.json.
ModelConfig load_model_config(const std::string& dir, const LoadOptions& opts = {});

// Loads a model folder (a Hugging Face folder, or a Megatron-LM checkpoint's run or
// iteration folder when it has no config.json). Errors: NotFound (no config.json, no weights,
// missing tensor), InvalidArgument (bad config, unsupported architecture, wrong tensor shape).
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts = {});

}  // namespace tachyon
