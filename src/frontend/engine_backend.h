// The InferenceBackend of `tachyon serve`: a model folder loaded through load_model,
// its tokenizer and chat template, and a TextEngine running them: each request's events
// come, with their text, a batch at a time, to the request's sink on a reader thread.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/async_model.h"
#include "frontend/adapters.h"
#include "frontend/backend.h"
#include "frontend/image_preprocessor.h"
#include "frontend/text_engine.h"
#include "model/loader.h"

namespace tachyon {

class Tokenizer;
class ChatTemplate;

struct EngineBackendOptions {
  std::string model_dir;
  std::string tokenizer_dir;            // empty: model_dir
  std::string model_type;               // architecture override
  std::string sparse_config;            // per-layer shapes file (LoadOptions::sparse_config)
  std::string served_name;              // empty: the model folder's name
  std::string device = "auto";          // cpu, cuda, cuda:N, auto
  std::string dtype = "auto";           // compute dtype on a GPU: auto (bf16), bf16, f16, f32
  std::string kv_cache_dtype = "auto";  // auto (the compute dtype), bf16, int8 (CPU) or fp8 (GPU)
  std::string quantization = "none";    // at load: none, int8, int4 or fp8
  // On a GPU, when neither engine.kv_cache_bytes nor engine.num_kv_blocks is given, the
  // KV cache takes what this share of the device's memory leaves after the weights.
  double gpu_memory_fraction = 0.9;
  double swap_space_gb = -1;  // GiB; < 0: the default (swap_space_bytes)
  int64_t max_seq_len = 0;    // 0: the model's; may only lower it
  // LoRA adapters: those registered at start; whether adapters may be loaded at all
  // (implied by any adapter given); the one adapter folded into the weights instead
  // (static LoRA); adapters resident on the device at once, their largest rank, and the
  // most registered at once.
  struct Lora {
    std::vector<AdapterInfo> adapters;
    bool enabled = false;
    bool merge = false;
    int32_t max_loras = 4;
    int32_t max_rank = 16;
    int32_t max_registered = 64;
  } lora;
  // Sizes not given are filled in at load; prefix_caching and prefix_cache_host_bytes
  // are taken as given.
  EngineConfig engine;
  // Called once the model is loaded and the KV budget set, before the engine starts:
  // a speculative proposer that needs the loaded model (a draft model's, whose KV cache
  // it takes out of the budget in `engine`). Unset: engine.proposer as given.
  std::function<std::shared_ptr<Proposer>(Model& model, const LoadOptions& load,
                                          EngineConfig* engine)>
      make_proposer;
  // Called with (done, total, stage) while loading; total 0 when unknown.
  std::function<void(double done, double total, const std::string& stage)> progress;
};

class EngineBackend : public InferenceBackend {
 public:
  // Loads everything and starts the engine. Throws NotFound / InvalidArgument for a
  // bad model folder, Unavailable when the device is missing.
  static std::shared_ptr<EngineBackend> load(const EngineBackendOptions& options);
  ~EngineBackend() override;

  const ModelInfo& model_info() const override { return info_; }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  ChatPrompt render_chat(const Json& messages, const nlohmann::ordered_json& tools,
                         bool add_generation_prompt, const Json& extra,
                         const RenderControl& control) const override;
  std::vector<int32_t> encode_chat(const ChatPrompt& prompt,
                                   bool add_special_tokens) const override;
  std::shared_ptr<GenerationHandle> generate(std::vector<int32_t> prompt,
                                             const GenerationParams& params, GenSink sink) override;
  // AsyncModel::pin_prefix; 0 when prefix caching is off.
  int32_t pin_prefix(const std::vector<int32_t>& ids) override;
  std::vector<AdapterInfo> adapters() const override;
  void load_adapter(const std::string& name, const std::string& path) override;
  void unload_adapter(const std::string& name) override;
  bool healthy() const override;
  std::string dead_reason() const override;
  BackendStats stats() const override;

  // Stops the engine: requests in flight end with an error.
  void shutdown();
  AsyncModel& engine() { return engine_->engine(); }

 private:
  EngineBackend() = default;

  ModelInfo info_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const ChatTemplate> chat_;
  std::shared_ptr<const ChatTemplate> chat_tools_;  // the one for requests with tools
  bool byte_level_ = false;                         // GPT-2 style byte-to-unicode token strings
  bool prefix_caching_ = false;
  // The image processor of a model with a vision tower (null without one), and the
  // model its images are checked against.
  std::unique_ptr<ImagePreprocessor> images_;
  std::shared_ptr<const LanguageModel> model_;
  std::unique_ptr<TextEngine> engine_;
  // Declared after the engine: gone before it (null when adapters are not enabled).
  std::unique_ptr<AdapterRegistry> adapters_;
  AdapterInfo merged_;  // the adapter folded into the weights, if any
};

// Converts the server's parameters to the engine's GenerateConfig (exposed for tests).
GenerateConfig to_generate_config(const GenerationParams& p);
// Converts one engine event (exposed for tests).
GenEvent to_gen_event(StreamEvent&& e);

}  // namespace tachyon
