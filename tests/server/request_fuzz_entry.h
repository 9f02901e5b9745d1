// The entry point of the request fuzz target, shared with the corpus replay test so the
// same code runs under libFuzzer (clang) and in the ordinary test binary (g++).
//
// An input is one HTTP request as the application sees it: a first line "METHOD PATH"
// and the body after it (an input without a newline is the body of POST /). It goes
// through ServerApp::handle, the router and the endpoint behind it (the native API,
// OpenAI chat and completions, the tokenizer endpoints, the admin routes) over a
// deterministic fake model (with task prompts 1 and "sum"), and the request is over
// before the next one starts.
//
// A bug, reported by abort() with a message, is any of: a status of 500 or more (bad
// input must be a client error; the fake model never fails on its own), a response
// never finished or finished twice, a JSON response body that is not JSON, a request
// still counted as active once its response ended, or a generation handed to the model
// that the engine would refuse (a constraint that does not compile, GenerateConfig's
// validate and validate_for_model, token ids outside the vocabulary, an empty prompt):
// the application's parsing must refuse everything the engine does, with its own clear
// error. Sanitizer reports are bugs too.
// Returns whether the request was answered with a 2xx status.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/json.h"
#include "core/logging.h"
#include "engine/generate_config.h"
#include "frontend/engine_backend.h"
#include "frontend/task_prompts.h"
#include "grammar/compile.h"
#include "server/app.h"
#include "server/fake_backend.h"

namespace tachyon::fuzz {

[[noreturn]] inline void request_bug(const std::string& what) {
  std::fprintf(stderr, "request fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// The fake model, checking what the application hands it as the engine would, and
// rendering any chat (the fake's own template reads a string "prefix" only).
class CheckingBackend : public server::testing::FakeBackend {
 public:
  CheckingBackend() : FakeBackend(/*max_model_len=*/96) {}

  ChatPrompt render_chat(const Json& messages, const nlohmann::ordered_json& tools,
                         bool add_generation_prompt, const Json& extra,
                         const RenderControl& control) const override {
    std::string out;
    for (const auto& m : messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") || !m["content"].is_string())
        request_bug("a chat message reached the template unnormalised: " + m.dump());
      out += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
    }
    if (!extra.is_object()) request_bug("chat_template_kwargs is not an object: " + extra.dump());
    if (add_generation_prompt) out += "assistant:";
    return {std::move(out), {}};
  }

  std::shared_ptr<GenerationHandle> generate(std::vector<int32_t> prompt,
                                             const GenerationParams& params,
                                             GenSink sink) override {
    const int32_t vocab = model_info().vocab_size;
    if (prompt.empty()) request_bug("an empty prompt reached the model");
    for (int32_t id : prompt)
      if (id < 0 || id >= vocab)
        request_bug("prompt token " + std::to_string(id) + " reached the model");
    try {
      // A constraint is compiled by the frontend (TextEngine) at submission: it must
      // compile; the engine then gets the compiled grammar.
      GenerationParams checked = params;
      if (checked.constraint) {
        grammar::build_grammar(*checked.constraint);
        checked.constraint.reset();
      }
      const GenerateConfig cfg = to_generate_config(checked);
      cfg.validate();
      cfg.validate_for_model(vocab, model_info().max_model_len,
                             static_cast<int32_t>(prompt.size()));
    } catch (const Error& e) {
      request_bug(std::string("the application let through what the engine refuses: ") + e.what());
    }
    // The fake refuses beams (the engine does not): let them through as one sequence.
    GenerationParams p = params;
    p.num_beams = 1;
    return FakeBackend::generate(std::move(prompt), p, std::move(sink));
  }
};

// Records the one response; the request is over once it has ended.
class RecordingWriter : public server::ResponseWriter {
 public:
  void respond(int status, std::string_view content_type, std::string body,
               const server::Headers&) override {
    std::lock_guard<std::mutex> lock(mu_);
    begin(status);
    if (content_type == "application/json" && Json::parse(body, nullptr, false).is_discarded())
      request_bug("a JSON response is not JSON: " + body.substr(0, 200));
    body_ = std::move(body);
    end();
  }
  void start_stream(int status, std::string_view, const server::Headers&) override {
    std::lock_guard<std::mutex> lock(mu_);
    begin(status);
    streaming_ = true;
  }
  bool write(std::string data) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!streaming_ || ended_) request_bug("a write outside a stream");
    body_ += data;
    return true;
  }
  void end_stream() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!streaming_) request_bug("end_stream without a stream");
    end();
  }
  bool client_closed() const override { return false; }
  void on_client_close(std::function<void()>) override {}
  size_t buffered_bytes() const override { return 0; }
  void post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(post_mu_);
    fn();
  }

  // Waits for the response's end; false after `timeout`.
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return ended_; });
  }
  int status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  std::string body() const {
    std::lock_guard<std::mutex> lock(mu_);
    return body_;
  }

 private:
  void begin(int status) {
    if (status_ != 0) request_bug("a second response to one request");
    if (status < 100 || status >= 600) request_bug("status " + std::to_string(status));
    status_ = status;
  }
  void end() {
    if (ended_) request_bug("a response ended twice");
    ended_ = true;
    cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::mutex post_mu_;
  std::condition_variable cv_;
  int status_ = 0;
  bool streaming_ = false, ended_ = false;
  std::string body_;
};

struct RequestFuzzer {
  std::shared_ptr<CheckingBackend> backend = std::make_shared<CheckingBackend>();
  std::unique_ptr<server::ServerApp> app;
  RequestFuzzer() {
    server::AppOptions o;
    o.model_name = "fake-model";
    o.limits.default_timeout_ms = 10000;  // no request outlives the wait below
    o.limits.max_timeout_ms = 10000;
    app = std::make_unique<server::ServerApp>(o);
    // Task prompts that requests may name (task_id 1 and "sum").
    auto tasks = parse_task_prompts(
        R"([{"task_id": 1, "prompt": "You are terse."}, {"task_id": "sum", "prompt": "Sum up:"}])",
        "fuzz tasks");
    app->set_backend(backend, install_task_prompts(*backend, tasks));
  }
};

inline bool request_one(const uint8_t* data, size_t size) {
  static RequestFuzzer* f = [] {
    set_log_level(LogLevel::kOff);
    return new RequestFuzzer();  // kept for the process: libFuzzer never returns
  }();
  const std::string input(reinterpret_cast<const char*>(data), size);
  server::HttpRequest req;
  const size_t nl = input.find('\n');
  if (nl == std::string::npos) {
    req.method = "POST";
    req.path = "/";
    req.body = input;
  } else {
    const std::string line = input.substr(0, nl);
    const size_t sp = line.find(' ');
    req.method = line.substr(0, sp);
    req.target = sp == std::string::npos ? "/" : line.substr(sp + 1);
    const size_t q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) req.query = req.target.substr(q + 1);
    req.body = input.substr(nl + 1);
  }
  req.version = 11;
  req.remote_address = "127.0.0.1";
  auto w = std::make_shared<RecordingWriter>();
  f->app->handle(std::move(req), w);
  if (!w->wait(std::chrono::seconds(30))) request_bug("no response within 30 s");
  f->backend->join_all();
  for (int i = 0; f->app->active_calls() != 0; ++i) {  // (the call ends just after its response)
    if (i == 1000) request_bug("a request is still active after its response");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int status = w->status();
  if (status >= 500)
    request_bug("status " + std::to_string(status) + ": " + w->body().substr(0, 300));
  return status >= 200 && status < 300;
}

}  // namespace tachyon::fuzz
