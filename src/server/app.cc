#include "server/app.h"

#include "core/logging.h"
#include "server/api_error.h"
#include "server/generation_call.h"
#include "server/text_util.h"

namespace tachyon::server {

void respond_json(ResponseWriter& w, int status, const Json& body, const Headers& headers) {
  w.respond(status, "application/json", dump_json(body), headers);
}

namespace {

// Forwards to the connection's writer; records the status, adds X-Request-Id, and when
// the request is over (the last reference dropped) counts it and logs it if asked.
class TrackedWriter : public ResponseWriter {
 public:
  TrackedWriter(std::shared_ptr<ResponseWriter> inner, std::string request_id, std::string route,
                std::string method, std::string path, std::string remote, ServerMetrics* metrics,
                bool log)
      : inner_(std::move(inner)),
        id_(std::move(request_id)),
        route_(std::move(route)),
        method_(std::move(method)),
        path_(std::move(path)),
        remote_(std::move(remote)),
        metrics_(metrics),
        log_(log),
        start_ms_(monotonic_ms()) {}
  ~TrackedWriter() override {
    if (log_)
      log_info("request {} {} {} from {}: status {}{}, {:.1f} ms", id_, method_, path_, remote_,
               status_, inner_->client_closed() ? " (client gone)" : "",
               monotonic_ms() - start_ms_);
  }

  void respond(int status, std::string_view content_type, std::string body,
               const Headers& headers) override {
    record(status);
    inner_->respond(status, content_type, std::move(body), with_id(headers));
  }
  void start_stream(int status, std::string_view content_type, const Headers& headers) override {
    record(status);
    inner_->start_stream(status, content_type, with_id(headers));
  }
  bool write(std::string data) override { return inner_->write(std::move(data)); }
  void end_stream() override { inner_->end_stream(); }
  bool client_closed() const override { return inner_->client_closed(); }
  void on_client_close(std::function<void()> fn) override {
    inner_->on_client_close(std::move(fn));
  }
  size_t buffered_bytes() const override { return inner_->buffered_bytes(); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }

 private:
  // Counted when the status is set, before the client can see it.
  void record(int status) {
    if (status_.exchange(status) == 0 && metrics_) metrics_->http_response(route_, status);
  }
  Headers with_id(const Headers& h) const {
    Headers out = h;
    out.emplace_back("X-Request-Id", id_);
    return out;
  }

  std::shared_ptr<ResponseWriter> inner_;
  std::string id_, route_, method_, path_, remote_;
  ServerMetrics* metrics_;
  bool log_;
  double start_ms_;
  std::atomic<int> status_{0};
};

struct RouteEntry {
  const char* path;
  std::vector<const char*> methods;
  bool public_route;     // no API key needed
  bool on_pool = false;  // POSTs handled on the work pool (bodies, templates, tokenizing)
};

const std::vector<RouteEntry>& routes() {
  static const std::vector<RouteEntry> kRoutes = {
      {"/", {"POST", "GET"}, false, true},
      {"/v1/chat/completions", {"POST"}, false, true},
      {"/chat/completions", {"POST"}, false, true},
      {"/v1/completions", {"POST"}, false, true},
      {"/v1/models", {"GET"}, false},
      {"/v1/models/*", {"GET"}, false},
      {"/tokenize", {"POST"}, false, true},
      {"/detokenize", {"POST"}, false, true},
      {"/tokenizer/encode", {"POST"}, false, true},
      {"/update", {"POST"}, false, true},
      {"/v1/load_lora_adapter", {"POST"}, false, true},
      {"/v1/unload_lora_adapter", {"POST"}, false, true},
      {"/health", {"GET", "POST"}, true},
      {"/worker_status", {"GET", "POST"}, false},
      {"/metrics", {"GET"}, false},
  };
  return kRoutes;
}

const RouteEntry* find_route(const std::string& path) {
  for (const auto& r : routes()) {
    std::string_view p = r.path;
    if (p.back() == '*') {
      if (path.size() > p.size() - 1 &&
          path.compare(0, p.size() - 1, p.substr(0, p.size() - 1)) == 0)
        return &r;
    } else if (path == p) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace

ServerApp::ServerApp(AppOptions options)
    : options_(std::move(options)),
      keys_(options_.api_keys),
      admission_(Admission::create(options_.max_concurrency, options_.max_queued)),
      created_(unix_time()),
      work_(std::make_unique<WorkPool>(options_.work_threads)) {
  metrics_ = std::make_unique<ServerMetrics>(
      options_.model_name,
      [this] {
        auto b = backend();
        return b ? b->stats() : BackendStats{};
      },
      [adm = admission_] { return adm->queued(); });
}

ServerApp::~ServerApp() {
  cancel_all();
}

void ServerApp::set_backend(std::shared_ptr<InferenceBackend> backend,
                            std::shared_ptr<const TaskPrefixes> tasks) {
  std::lock_guard<std::mutex> lock(mu_);
  backend_ = std::move(backend);
  tasks_ = std::move(tasks);
}

std::shared_ptr<InferenceBackend> ServerApp::backend() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backend_;
}

std::shared_ptr<InferenceBackend> ServerApp::ready_backend() const {
  if (shutting_down()) throw ApiError::unavailable("the server is shutting down");
  auto b = backend();
  if (!b) throw ApiError::unavailable("the model is still loading");
  if (!b->healthy()) throw ApiError::unavailable("the engine has stopped: " + b->dead_reason());
  return b;
}

void ServerApp::handle(HttpRequest&& req, std::shared_ptr<ResponseWriter> writer) {
  const RouteEntry* route = find_route(req.path);
  std::string route_name = route ? route->path : "unmatched";
  std::string id = std::to_string(++next_request_id_);
  auto w =
      std::make_shared<TrackedWriter>(std::move(writer), id, route_name, req.method, req.path,
                                      req.remote_address, metrics_.get(), options_.log_requests);
  bool native = req.path == "/" || req.path == "/tokenizer/encode" || req.path == "/update";
  try {
    // The key is checked before the route and the method, so that a client without one
    // learns nothing of which routes exist; only the public routes (health) skip it.
    if (route == nullptr || !route->public_route) {
      auto auth = req.header("authorization");
      std::string_view value = auth ? *auth : std::string_view();
      if (!keys_.allows(auth ? &value : nullptr)) {
        ApiError e = ApiError::unauthorized();
        respond_json(*w, e.status(), native ? e.native_json() : e.openai_json(),
                     {{"WWW-Authenticate", "Bearer"}});
        return;
      }
    }
    if (route == nullptr) throw ApiError::not_found("no route for " + req.method + " " + req.path);
    bool method_ok = false;
    std::string allow;
    for (const char* m : route->methods) {
      method_ok = method_ok || req.method == m;
      allow += (allow.empty() ? "" : ", ") + std::string(m);
    }
    if (!method_ok) {
      ApiError e = ApiError::method_not_allowed(req.method, req.path);
      respond_json(*w, e.status(), native ? e.native_json() : e.openai_json(), {{"Allow", allow}});
      return;
    }
    if (options_.log_requests)
      log_info("request {} {} {} from {} ({} bytes)", id, req.method, req.path, req.remote_address,
               req.body.size());
  } catch (...) {
    ApiError e = ApiError::from_current_exception();
    respond_json(*w, e.status(), native ? e.native_json() : e.openai_json());
    return;
  }
  if (route->on_pool && req.method == "POST")
    return run_on_pool(std::move(req), std::move(w), std::move(route_name), native);
  run_handler(req, w, route_name, native, RenderControl{});
}

void ServerApp::run_handler(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                            const std::string& route, bool native, const RenderControl& control) {
  try {
    dispatch(req, w, route, control);
  } catch (...) {
    ApiError e = ApiError::from_current_exception();
    if (control.cancel != nullptr && control.cancel->load() && shutting_down())
      e = ApiError::unavailable("the server is shutting down");
    if (e.status() >= 500) log_warning("request {} failed: {}", req.path, e.message());
    respond_json(*w, e.status(), native ? e.native_json() : e.openai_json());
  }
}

void ServerApp::run_on_pool(HttpRequest&& req, std::shared_ptr<ResponseWriter> w, std::string route,
                            bool native) {
  auto cancel = std::make_shared<std::atomic<bool>>(shutting_down());
  const uint64_t key = ++next_work_id_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_cancels_.emplace(key, cancel);
  }
  working_.fetch_add(1);
  w->on_client_close([cancel] { cancel->store(true); });
  work_->post([this, req = std::move(req), w = std::move(w), route = std::move(route), native,
               cancel, key] {
    RenderControl control;
    control.cancel = cancel.get();
    control.deadline = std::chrono::steady_clock::now() + options_.render_timeout;
    run_handler(req, w, route, native, control);
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_cancels_.erase(key);
    }
    working_.fetch_sub(1);
  });
}

void ServerApp::cancel_work() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, cancel] : work_cancels_) cancel->store(true);
}

void ServerApp::begin_shutdown() {
  shutting_down_.store(true);
  cancel_work();
}

void ServerApp::dispatch(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                         const std::string& route, const RenderControl& control) {
  if (route == "/") {
    if (req.method == "GET") {
      ready_backend();
      respond_json(*w, 200, "ok");
      return;
    }
    return handle_native(req, w, control);
  }
  if (route == "/v1/chat/completions" || route == "/chat/completions")
    return handle_chat(req, w, control);
  if (route == "/v1/completions") return handle_completions(req, w);
  if (route == "/v1/models") return handle_models(w, "");
  if (route == "/v1/models/*")
    return handle_models(w, req.path.substr(std::string("/v1/models/").size()));
  if (route == "/tokenize") return handle_tokenize(req, w, control);
  if (route == "/detokenize") return handle_detokenize(req, w);
  if (route == "/tokenizer/encode") return handle_tokenizer_encode(req, w);
  if (route == "/update") return handle_update(req, w);
  if (route == "/v1/load_lora_adapter") return handle_load_lora(req, w);
  if (route == "/v1/unload_lora_adapter") return handle_unload_lora(req, w);
  if (route == "/health") return handle_health(w);
  if (route == "/worker_status") return handle_worker_status(w);
  if (route == "/metrics") {
    w->respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_->render());
    return;
  }
  throw ApiError::not_found("no route for " + req.path);
}

void ServerApp::cancel_all() {
  cancel_work();
  std::vector<std::shared_ptr<GenerationCall>> calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ptr, weak] : calls_)
      if (auto c = weak.lock()) calls.push_back(std::move(c));
  }
  for (auto& c : calls) c->cancel(false, ApiError::unavailable("the server is shutting down"));
}

int64_t ServerApp::active_calls() const {
  return active_.load() + working_.load();
}

}  // namespace tachyon::server
