// `tachyon serve` settings, resolved through the settings table (core/settings.h). Each
// one comes from, in order of precedence: its flag (--max-concurrency 8), its
// environment variable (TACHYON_MAX_CONCURRENCY), RTP-LLM's environment name where one
// exists (CONCURRENCY_LIMIT), the --config file (YAML or JSON, keys spelled like the
// flags with - or _), and finally the default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/settings.h"
#include "frontend/task_prompts.h"
#include "frontend/tool_calls.h"

namespace tachyon::server {

struct ServeConfig {
  // Model.
  std::string model;  // checkpoint directory; empty: the bundled demo model
  std::string tokenizer;
  std::string model_type;
  std::string sparse_config;  // per-layer shapes replacing config.json's; empty: none
  std::string served_model_name;
  int64_t max_seq_len = 0;  // 0: the model's
  std::string device = "auto";
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";  // auto (the compute dtype), bf16, int8 (CPU) or fp8 (GPU)
  std::string quantization = "none";    // at load: none, int8, int4 or fp8
  double gpu_memory_fraction = 0.9;     // share of GPU memory the process may use (KV sizing)
  double swap_space_gb = -1;  // host memory for swapped-out KV blocks; < 0: 4 on a GPU, 0 on CPUs
  // Engine.
  int64_t max_num_seqs = 0;            // 0: the engine's default
  int64_t max_num_batched_tokens = 0;  // 0: the engine's default
  int64_t num_kv_blocks = 0;           // 0: sized from kv_cache_bytes or defaults
  int64_t kv_cache_bytes = 0;          // from --kv-cache-mb (or its alias --kv-cache-bytes)
  int64_t block_size = 0;
  int64_t threads = 0;        // compute threads; 0: all cores
  bool overlap_steps = true;  // queue the next step before the host sees the last one's tokens
  bool prefix_caching = true;
  double prefix_cache_host_gib = 0;  // host tier of the prefix cache
  // Task prompts (--system-prompts FILE or --system-prompts-json TEXT), parsed.
  std::vector<TaskPrompt> task_prompts;
  // HTTP.
  std::string host = "127.0.0.1";
  int64_t port = 8088;
  int64_t io_threads = 2;
  int64_t max_connections = 4096;
  int64_t max_body_bytes = 32 << 20;
  double keep_alive_timeout_s = 30;
  double read_timeout_s = 30;
  double write_timeout_s = 60;
  double shutdown_timeout_s = 30;
  double render_timeout_s = 10;
  int64_t work_threads = 4;
  // Protection.
  int64_t max_concurrency = 256;
  int64_t max_queued_requests = 1024;
  int64_t max_n = 16;
  int64_t max_tokens = 0;  // 0: the model's window
  int64_t max_stop = 16;
  int64_t max_prompts = 64;
  int64_t max_top_logprobs = 20;
  double request_timeout_s = 0;  // 0: none
  std::vector<std::string> api_keys;
  // Images in requests: allowed URL hosts (empty: any), the folder local files must be
  // under (empty: none), the fetch timeout and the size limits.
  std::vector<std::string> allowed_media_domains;
  std::string allowed_local_media_path;
  double media_fetch_timeout_s = 5;
  int64_t max_image_bytes = 32 << 20;
  int64_t max_image_pixels = 64'000'000;
  bool allow_special_tokens_in_content = false;
  // Tool calling: the format of tool_choice "auto" (--enable-auto-tool-choice
  // --tool-call-parser); unset: the chat template's.
  std::optional<ToolCallFormat> tool_call_parser;
  // Logging.
  bool log_requests = false;
  bool log_prompts = false;
  std::string log_level = "info";
  bool progress = true;
  // Every setting as resolved, for what the binary reads itself (the LoRA settings:
  // cli/lora_options.h).
  SettingValues settings{"serve"};
};

using tachyon::EnvLookup;
using tachyon::process_env;

// Resolves the settings from the arguments after `serve`. Throws InvalidArgument on an
// unknown flag or config key, a bad value, or an unreadable config file. Returns
// nullopt when --help was asked for (the help is in *help_out).
std::optional<ServeConfig> load_serve_config(const std::vector<std::string>& args,
                                             const EnvLookup& env, std::string* help_out);

// The --help text: every setting with its flag, variables and default.
std::string serve_help();

}  // namespace tachyon::server
