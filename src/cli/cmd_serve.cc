// tachyon serve: loads a model and serves it over HTTP (see docs/api.md).
//
// Lifecycle: the HTTP server listens first (so /health can say "loading"), the model
// loads on a separate thread, then requests are served until SIGINT/SIGTERM. Then: stop
// accepting, let requests in flight finish for --shutdown-timeout seconds, cancel the
// rest, exit 0. If the engine dies the server shuts down and exits 1.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/draft_setup.h"
#include "cli/load_progress.h"
#include "cli/lora_options.h"
#include "cli/model_dir.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "frontend/engine_backend.h"
#include "frontend/task_prompts.h"
#include "model/megatron.h"
#include "server/app.h"
#include "server/http_server.h"
#include "server/serve_config.h"

namespace tachyon::cli {
namespace {

namespace fs = std::filesystem;
using server::ServeConfig;

std::string served_name(const ServeConfig& c, const std::string& model_dir) {
  if (!c.served_model_name.empty()) return c.served_model_name;
  fs::path p = fs::absolute(model_dir).lexically_normal();
  return p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
}

server::AppOptions app_options(const ServeConfig& c, const std::string& name) {
  server::AppOptions o;
  o.model_name = name;
  o.limits.max_n = static_cast<int32_t>(c.max_n);
  o.limits.max_stop = static_cast<int32_t>(c.max_stop);
  o.limits.max_top_logprobs = static_cast<int32_t>(c.max_top_logprobs);
  o.limits.max_prompts = static_cast<int32_t>(c.max_prompts);
  o.limits.max_tokens = c.max_tokens;
  o.limits.default_timeout_ms = static_cast<int64_t>(c.request_timeout_s * 1000);
  o.limits.max_timeout_ms = o.limits.default_timeout_ms;
  o.api_keys = c.api_keys;
  o.media.allowed_domains = c.allowed_media_domains;
  o.media.allowed_local_path = c.allowed_local_media_path;
  o.media.fetch_timeout_s = c.media_fetch_timeout_s;
  o.media.limits.max_bytes = c.max_image_bytes;
  o.media.limits.max_pixels = c.max_image_pixels;
  o.special_tokens_in_content = c.allow_special_tokens_in_content;
  o.tool_call_parser = c.tool_call_parser;
  o.max_concurrency = c.max_concurrency;
  o.max_queued = c.max_queued_requests;
  o.log_requests = c.log_requests;
  o.log_prompts = c.log_requests && c.log_prompts;
  o.work_threads = static_cast<int>(c.work_threads);
  o.render_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.render_timeout_s * 1000));
  return o;
}

server::HttpServerOptions http_options(const ServeConfig& c) {
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  server::HttpServerOptions o;
  o.host = c.host;
  o.port = static_cast<uint16_t>(c.port);
  o.io_threads = static_cast<int>(c.io_threads);
  o.max_body_bytes = static_cast<size_t>(c.max_body_bytes);
  o.max_connections = static_cast<size_t>(c.max_connections);
  o.keep_alive_timeout = ms(c.keep_alive_timeout_s);
  o.request_timeout = ms(c.read_timeout_s);
  o.write_timeout = ms(c.write_timeout_s);
  return o;
}

EngineBackendOptions backend_options(const ServeConfig& c, const std::string& model_dir,
                                     const std::string& name, const LoraOptions& lora) {
  EngineBackendOptions o;
  // The start adapters are registered once the backend is up (below), or merged.
  o.lora.enabled = lora.enabled;
  o.lora.merge = lora.merge;
  if (lora.merge) o.lora.adapters = lora.adapters;
  o.lora.max_loras = lora.max_loras;
  o.lora.max_rank = lora.max_rank;
  o.lora.max_registered = lora.max_registered;
  o.model_dir = model_dir;
  o.tokenizer_dir = c.tokenizer;
  o.model_type = c.model_type;
  o.sparse_config = c.sparse_config;
  o.served_name = name;
  o.device = c.device;
  o.dtype = c.dtype;
  o.kv_cache_dtype = c.kv_cache_dtype;
  o.quantization = c.quantization;
  o.gpu_memory_fraction = c.gpu_memory_fraction;
  o.swap_space_gb = c.swap_space_gb;
  o.max_seq_len = c.max_seq_len;
  if (c.block_size > 0) o.engine.block_size = static_cast<int32_t>(c.block_size);
  if (c.num_kv_blocks > 0) o.engine.num_kv_blocks = static_cast<int32_t>(c.num_kv_blocks);
  if (c.kv_cache_bytes > 0) o.engine.kv_cache_bytes = c.kv_cache_bytes;
  o.engine.overlap_steps = c.overlap_steps;
  o.engine.prefix_caching = c.prefix_caching;
  o.engine.prefix_cache_host_bytes =
      static_cast<int64_t>(c.prefix_cache_host_gib * double(int64_t{1} << 30));
  if (c.max_num_seqs > 0) o.engine.max_num_seqs = static_cast<int32_t>(c.max_num_seqs);
  if (c.max_num_batched_tokens > 0)
    o.engine.max_num_batched_tokens = static_cast<int32_t>(c.max_num_batched_tokens);
  if (o.engine.max_num_batched_tokens < o.engine.max_num_seqs)
    o.engine.max_num_batched_tokens = o.engine.max_num_seqs;
  o.engine.max_queue_size = static_cast<int32_t>(
      std::min<int64_t>(INT32_MAX, c.max_concurrency * std::max<int64_t>(1, c.max_n) + 16));
  return o;
}

// Waits up to `ms` for SIGINT/SIGTERM; returns the signal or 0.
int wait_signal(const sigset_t& set, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

}  // namespace

int cmd_serve(const CommandArgs& args) {
  std::string help;
  auto loaded = server::load_serve_config(args, server::process_env, &help);
  if (!loaded) {
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  ServeConfig cfg = *loaded;
  set_log_level(parse_log_level(cfg.log_level));
  if (cfg.threads > 0) ThreadPool::set_global_threads(static_cast<int>(cfg.threads));
  std::string model_dir = resolve_model_dir(cfg.model);
  if (!is_megatron_checkpoint(model_dir) && !fs::exists(fs::path(model_dir) / "config.json"))
    raise<NotFound>("model directory '{}' has no config.json (nor is it a Megatron-LM checkpoint)",
                    model_dir);
  std::string name = served_name(cfg, model_dir);
  // The LoRA settings are checked before the model loads.
  const LoraOptions lora = lora_options(cfg.settings);
  const SpeculativeOptions spec = speculative_options(cfg.settings);
  const std::shared_ptr<Proposer> proposer = make_proposer(spec);

  // Signals are taken synchronously by the main thread; every other thread blocks them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::ServerApp app(app_options(cfg, name));
  server::HttpServer http(http_options(cfg), [&app](server::HttpRequest&& r,
                                                    std::shared_ptr<server::ResponseWriter> w) {
    app.handle(std::move(r), std::move(w));
  });
  http.start();
  log_info("serving {} on http://{}:{} (model loading)", name, cfg.host, http.port());

  // Load on another thread so that signals and /health work meanwhile.
  std::shared_ptr<EngineBackend> backend;
  std::shared_ptr<const TaskPrefixes> tasks;
  std::string load_error;
  std::atomic<bool> load_done{false};
  std::thread loader([&] {
    try {
      LoadProgress progress(cfg.progress);
      prefetch_weights(model_dir, progress);
      auto o = backend_options(cfg, model_dir, name, lora);
      o.engine.proposer = proposer;
      o.engine.num_speculative_tokens = spec.num_speculative_tokens;
      if (spec.method == "draft_model")
        o.make_proposer = [&](Model& target, const LoadOptions& lo, EngineConfig* ec) {
          return make_draft_proposer(cfg.settings, spec, model_dir, target, lo, ec);
        };
      o.progress = [&progress](double d, double t, const std::string& s) {
        progress.update(d, t, s);
      };
      auto loaded_backend = EngineBackend::load(o);
      progress.finish();
      // The adapters given at start (--lora, LORA_INFO), registered for requests to name.
      if (lora.enabled)
        for (const AdapterInfo& a : lora.adapters) {
          loaded_backend->load_adapter(a.name, a.path);
          log_info("LoRA adapter '{}' from {}", a.name, a.path);
        }
      // The task prompts' K/V, computed and pinned before the first request.
      if (!cfg.task_prompts.empty())
        tasks = install_task_prompts(*loaded_backend, cfg.task_prompts);
      backend = std::move(loaded_backend);
    } catch (const std::exception& e) {
      load_error = e.what();
    }
    load_done.store(true);
  });
  while (!load_done.load()) {
    if (int sig = wait_signal(signals, 100)) {
      log_info("{} while loading: exiting", strsignal(sig));
      http.stop();
      std::fflush(stderr);
      std::_Exit(0);  // the loader cannot be interrupted; nothing has been served yet
    }
  }
  loader.join();
  if (!backend) {
    http.stop();
    raise<InvalidArgument>("cannot load model '{}': {}", model_dir, load_error);
  }
  app.set_backend(backend, tasks);
  log_info("ready: {} (max_model_len {}, {} KV blocks of {} tokens) on http://{}:{}", name,
           backend->model_info().max_model_len, backend->stats().num_kv_blocks,
           backend->stats().block_size, cfg.host, http.port());

  int exit_code = 0;
  int sig = 0;
  // Once the server falls idle after a burst, hand the memory the allocator keeps in
  // its per-thread arenas back to the system (glibc keeps freed memory otherwise).
  auto last_busy = std::chrono::steady_clock::now();
  bool trimmed = true;
  while ((sig = wait_signal(signals, 200)) == 0) {
    if (!backend->healthy()) {
      log_error("the engine stopped: {}; shutting down", backend->dead_reason());
      exit_code = 1;
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (app.active_calls() > 0) {
      last_busy = now;
      trimmed = false;
    } else if (!trimmed && now - last_busy > std::chrono::seconds(2)) {
      malloc_trim(0);
      trimmed = true;
    }
  }
  if (sig)
    log_info("{}: shutting down ({} requests in flight)", strsignal(sig), app.active_calls());
  app.begin_shutdown();
  http.stop_accepting();
  auto grace = std::chrono::milliseconds(static_cast<int64_t>(cfg.shutdown_timeout_s * 1000));
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (exit_code == 0 && app.active_calls() > 0 && std::chrono::steady_clock::now() < deadline) {
    if (wait_signal(signals, 50)) {
      log_info("second signal: cancelling requests in flight");
      break;
    }
  }
  if (app.active_calls() > 0) {
    log_info("cancelling {} requests still in flight", app.active_calls());
    app.cancel_all();
  }
  for (int i = 0; i < 200 && app.active_calls() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http.wait_idle(std::chrono::seconds(2));
  http.stop();
  backend->shutdown();
  log_info("stopped");
  return exit_code;
}

}  // namespace tachyon::cli
