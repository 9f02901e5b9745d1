#include "server/serve_config.h"

#include "core/error.h"

namespace tachyon::server {
namespace {

constexpr const char* kUsage =
    "usage: tachyon serve [--model DIR] [--host 127.0.0.1] [--port 8088] [flags]\n\n"
    "Serves a model over HTTP: RTP-LLM's native API (POST /) and the OpenAI API (/v1/...).\n";

// The task prompts of --system-prompts (a file) or --system-prompts-json (inline), the
// errors prefixed with where the setting came from.
std::vector<TaskPrompt> task_prompts_setting(const SettingValues& v) {
  const bool file = v.given("system-prompts"), inline_json = v.given("system-prompts-json");
  if (file && inline_json)
    raise<InvalidArgument>(
        "task prompts are given twice, by {} and by {}: give a file (--system-prompts, "
        "MULTI_TASK_PROMPT) or inline JSON (--system-prompts-json, MULTI_TASK_PROMPT_STR), not "
        "both",
        v.source("system-prompts"), v.source("system-prompts-json"));
  if (inline_json) {
    const std::string source = v.source("system-prompts-json");
    return parse_task_prompts(v.str("system-prompts-json"), source);
  }
  if (!file) return {};
  const std::string source = v.source("system-prompts");
  const std::string path = v.str("system-prompts");
  if (path.empty()) raise<InvalidArgument>("{}: no file named", source);
  try {
    return load_task_prompts(path);
  } catch (const Error& e) {
    raise<InvalidArgument>("{}: {}", source, e.what());
  }
}

ServeConfig from_settings(const SettingValues& v) {
  ServeConfig c;
  c.model = v.str("model");
  c.tokenizer = v.str("tokenizer");
  c.model_type = v.str("model-type");
  c.sparse_config = v.str("sparse-config");
  c.served_model_name = v.str("served-model-name");
  c.max_seq_len = v.integer("max-seq-len");
  c.device = v.str("device");
  c.dtype = v.str("dtype");
  c.kv_cache_dtype = v.str("kv-cache-dtype");
  c.quantization = v.str("quantization");
  c.gpu_memory_fraction = v.number("gpu-memory-fraction");
  c.swap_space_gb = v.has("swap-space") ? v.number("swap-space") : -1;
  c.max_num_seqs = v.integer("max-num-seqs");
  c.max_num_batched_tokens = v.integer("max-num-batched-tokens");
  c.num_kv_blocks = v.integer("num-kv-blocks");
  c.kv_cache_bytes = static_cast<int64_t>(v.number("kv-cache-mb") * 1024 * 1024);
  c.block_size = v.integer("block-size");
  c.threads = v.integer("threads");
  c.overlap_steps = v.flag("overlap-steps");
  c.prefix_caching = v.flag("prefix-caching");
  c.prefix_cache_host_gib = v.number("prefix-cache-host-gib");
  c.task_prompts = task_prompts_setting(v);
  c.host = v.str("host");
  c.port = v.integer("port");
  c.io_threads = v.integer("io-threads");
  c.max_connections = v.integer("max-connections");
  c.max_body_bytes = v.integer("max-body-bytes");
  c.keep_alive_timeout_s = v.number("keep-alive-timeout");
  c.read_timeout_s = v.number("read-timeout");
  c.write_timeout_s = v.number("write-timeout");
  c.shutdown_timeout_s = v.number("shutdown-timeout");
  c.render_timeout_s = v.number("render-timeout");
  c.work_threads = v.integer("work-threads");
  c.max_concurrency = v.integer("max-concurrency");
  c.max_queued_requests = v.integer("max-queued-requests");
  c.max_n = v.integer("max-n");
  c.max_tokens = v.integer("max-tokens");
  c.max_stop = v.integer("max-stop");
  c.max_prompts = v.integer("max-prompts");
  c.max_top_logprobs = v.integer("max-top-logprobs");
  c.request_timeout_s = v.number("request-timeout");
  c.api_keys = v.list("api-key");
  c.allowed_media_domains = v.list("allowed-media-domains");
  c.allowed_local_media_path = v.str("allowed-local-media-path");
  c.media_fetch_timeout_s = v.number("media-fetch-timeout");
  c.max_image_bytes = v.integer("max-image-bytes");
  c.max_image_pixels = v.integer("max-image-pixels");
  c.allow_special_tokens_in_content = v.flag("allow-special-tokens-in-content");
  if (v.flag("enable-auto-tool-choice") != v.given("tool-call-parser"))
    raise<InvalidArgument>("--enable-auto-tool-choice and --tool-call-parser go together");
  if (v.given("tool-call-parser")) {
    c.tool_call_parser = tool_call_format_from_name(v.str("tool-call-parser"));
    if (!c.tool_call_parser)
      raise<InvalidArgument>("--tool-call-parser '{}' is not one of hermes, llama3_json, mistral",
                             v.str("tool-call-parser"));
  }
  c.log_requests = v.flag("log-requests");
  c.log_prompts = v.flag("log-prompts");
  c.log_level = v.str("log-level");
  c.progress = v.flag("progress");
  c.settings = v;
  return c;
}

}  // namespace

std::optional<ServeConfig> load_serve_config(const std::vector<std::string>& args,
                                             const EnvLookup& env, std::string* help_out) {
  auto values = parse_settings("serve", args, env);
  if (!values) {
    if (help_out) *help_out = serve_help();
    return std::nullopt;
  }
  return from_settings(*values);
}

std::string serve_help() {
  return settings_help("serve", kUsage);
}

}  // namespace tachyon::server
