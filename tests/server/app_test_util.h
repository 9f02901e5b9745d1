// A server (HttpServer + ServerApp) on a free port, over a FakeBackend or any backend, for
// tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "server/app.h"
#include "server/fake_backend.h"
#include "server/http_server.h"
#include "server/test_http_client.h"

namespace tachyon::server::testing {

// An HTTP server on a free port handing every request to `app`, started.
inline std::unique_ptr<HttpServer> serve_app(ServerApp& app) {
  HttpServerOptions ho;
  ho.port = 0;
  ho.io_threads = 2;
  auto http =
      std::make_unique<HttpServer>(ho, [&app](HttpRequest&& r, std::shared_ptr<ResponseWriter> w) {
        app.handle(std::move(r), std::move(w));
      });
  http->start();
  return http;
}

struct TestServer {
  explicit TestServer(AppOptions opt = default_options(), bool with_backend = true) {
    app = std::make_unique<ServerApp>(opt);
    backend = std::make_shared<FakeBackend>();
    if (with_backend) app->set_backend(backend);
    http = serve_app(*app);
  }
  ~TestServer() {
    app->cancel_all();
    backend->join_all();
    http->stop();
  }

  static AppOptions default_options() {
    AppOptions o;
    o.model_name = "fake-model";
    return o;
  }

  TestResponse post(const std::string& path, const std::string& body,
                    const std::map<std::string, std::string>& headers = {}) {
    TestConnection c(http->port());
    return c.request("POST", path, body, headers);
  }
  TestResponse post(const std::string& path, const Json& body,
                    const std::map<std::string, std::string>& headers = {}) {
    return post(path, body.dump(), headers);
  }
  TestResponse get(const std::string& path,
                   const std::map<std::string, std::string>& headers = {}) {
    TestConnection c(http->port());
    return c.request("GET", path, "", headers);
  }

  std::unique_ptr<ServerApp> app;
  std::shared_ptr<FakeBackend> backend;
  std::unique_ptr<HttpServer> http;
};

// The events of an SSE body: each "data: X" payload, in order (separator given).
inline std::vector<std::string> sse_payloads(const std::string& body,
                                             const std::string& sep = "\n\n",
                                             const std::string& prefix = "data: ") {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find(sep, pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event in: " << body.substr(pos);
    if (end == std::string::npos) break;
    std::string ev = body.substr(pos, end - pos);
    EXPECT_EQ(ev.rfind(prefix, 0), 0u) << "bad event: " << ev;
    out.push_back(ev.substr(prefix.size()));
    pos = end + sep.size();
  }
  return out;
}

inline Json parse(const std::string& s) {
  return Json::parse(s);
}

}  // namespace tachyon::server::testing
