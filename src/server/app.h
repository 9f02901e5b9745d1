// The HTTP application (RTP-LLM's InferenceApp): routes, API keys, admission control,
// request logging and metrics around the endpoints of both APIs.
//
//   POST /                       RTP-LLM native generation
//   POST /v1/chat/completions    OpenAI chat (also /chat/completions)
//   POST /v1/completions         OpenAI completions
//   GET  /v1/models[/{id}]       the served model and its LoRA adapters
//   POST /update                 RTP-LLM's declarative LoRA adapter set (app_adapters.cc)
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter   vLLM's adapter loading
//   POST /tokenize, /detokenize, /tokenizer/encode
//   GET  /health, /worker_status, /metrics
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/backend.h"
#include "frontend/task_prompts.h"
#include "frontend/tool_calls.h"
#include "media/image_source.h"
#include "server/admission.h"
#include "server/auth.h"
#include "server/http.h"
#include "server/openai_protocol.h"
#include "server/server_metrics.h"
#include "server/work_pool.h"

namespace tachyon::server {

class GenerationCall;
class CallFormatter;
struct CallPrompt;
class ApiError;

struct AppOptions {
  std::string model_name;  // served name (known before the model loads)
  RequestLimits limits;
  std::vector<std::string> api_keys;
  int64_t max_concurrency = 64;
  int64_t max_queued = 256;
  bool log_requests = false;
  bool log_prompts = false;
  // Whether special tokens written in chat messages (and tools, kwargs) are matched as
  // special tokens; off: only the chat template's own text gives them.
  bool special_tokens_in_content = false;
  // The format tool_choice "auto" reads tool calls in (--enable-auto-tool-choice
  // --tool-call-parser); unset: the one the chat template tells (ModelInfo), else "auto"
  // with tools is refused.
  std::optional<ToolCallFormat> tool_call_parser;
  // Request work off the HTTP threads (bodies, chat templates, tokenizing): threads, and
  // how long one chat template render may take.
  int work_threads = 4;
  std::chrono::milliseconds render_timeout{10000};
  // Where request images may come from, and their limits.
  media::MediaOptions media;
};

class ServerApp {
 public:
  explicit ServerApp(AppOptions options);
  ~ServerApp();
  ServerApp(const ServerApp&) = delete;
  ServerApp& operator=(const ServerApp&) = delete;

  // The HttpServer's handler.
  void handle(HttpRequest&& req, std::shared_ptr<ResponseWriter> writer);

  // Until a backend is set, /health says "loading" and generation answers 503. `tasks`:
  // the task prompts requests may name by task_id (none when null).
  void set_backend(std::shared_ptr<InferenceBackend> backend,
                   std::shared_ptr<const TaskPrefixes> tasks = nullptr);
  std::shared_ptr<InferenceBackend> backend() const;

  // Shutdown: new generation requests get 503 and /health turns 503; renders in
  // progress are cancelled.
  void begin_shutdown();
  bool shutting_down() const { return shutting_down_.load(); }
  // Ends every generation still running or queued with 503 (server shutting down), and
  // cancels every render in progress.
  void cancel_all();
  // Requests in flight: generations running or queued, and requests whose body is
  // being parsed or whose prompt is being rendered.
  int64_t active_calls() const;

  ServerMetrics& metrics() { return *metrics_; }
  const Admission& admission() const { return *admission_; }

 private:
  struct Route;
  // A request's handler, with its errors answered; `control` stops its render.
  void run_handler(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                   const std::string& route, bool native, const RenderControl& control);
  void dispatch(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                const std::string& route, const RenderControl& control);
  // Runs a request's handler on the work pool; the client leaving, or the server
  // shutting down, cancels its render.
  void run_on_pool(HttpRequest&& req, std::shared_ptr<ResponseWriter> w, std::string route,
                   bool native);
  void cancel_work();

  // Generation endpoints (app_generate.cc).
  void handle_chat(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                   const RenderControl& control);
  void handle_completions(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w);
  void handle_native(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                     const RenderControl& control);
  void run_call(const std::shared_ptr<ResponseWriter>& w, std::unique_ptr<CallFormatter> formatter,
                std::vector<CallPrompt> prompts, bool native_errors);
  std::shared_ptr<InferenceBackend> ready_backend() const;  // throws 503
  // The LoRA adapter an OpenAI request's "model" selects: "" for the base model (no
  // model, the served name or the model's path), an adapter's name; 404
  // model_not_found for anything else.
  std::string resolve_model(const std::string& requested, const InferenceBackend& backend) const;
  // The token ids of the task prompt a request names (empty without a task_id); 400 for
  // a task_id that is not configured.
  std::vector<int32_t> task_prefix(const std::optional<std::string>& task_id) const;

  // Admin endpoints (app_admin.cc).
  void handle_health(const std::shared_ptr<ResponseWriter>& w);
  void handle_worker_status(const std::shared_ptr<ResponseWriter>& w);
  void handle_models(const std::shared_ptr<ResponseWriter>& w, const std::string& id);
  void handle_tokenize(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                       const RenderControl& control);
  void handle_detokenize(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w);
  void handle_tokenizer_encode(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w);

  // LoRA adapter endpoints (app_adapters.cc).
  void handle_update(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w);
  void handle_load_lora(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w);
  void handle_unload_lora(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w);

  AppOptions options_;
  ApiKeys keys_;
  std::shared_ptr<Admission> admission_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::atomic<bool> shutting_down_{false};
  int64_t created_ = 0;
  std::atomic<uint64_t> next_request_id_{0};
  std::atomic<uint64_t> next_work_id_{0};

  // Held by the requests that change the registered adapters: one change at a time.
  std::mutex adapters_mu_;
  mutable std::mutex mu_;
  std::shared_ptr<InferenceBackend> backend_;
  std::shared_ptr<const TaskPrefixes> tasks_;
  std::unordered_map<GenerationCall*, std::weak_ptr<GenerationCall>> calls_;
  std::atomic<int64_t> active_{0};
  // Requests on the work pool, and their cancel flags (under mu_).
  std::atomic<int64_t> working_{0};
  std::unordered_map<uint64_t, std::shared_ptr<std::atomic<bool>>> work_cancels_;
  std::unique_ptr<WorkPool> work_;  // last: its threads are joined first
};

// Writes a JSON response.
void respond_json(ResponseWriter& w, int status, const Json& body, const Headers& headers = {});

}  // namespace tachyon::server
