// An asynchronous HTTP/1.1 server on Boost.Beast/Asio: keep-alive, size limits and
// read/write timeouts, streamed (chunked) responses, detection of clients that go away
// while their request is being answered, and a graceful shutdown.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/http.h"

namespace tachyon::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8088;  // 0 picks a free port; see HttpServer::port()
  int io_threads = 1;
  size_t max_body_bytes = 32u << 20;    // larger bodies get 413
  size_t max_header_bytes = 64u << 10;  // larger headers get 431
  size_t max_connections = 4096;        // more get 503 and are closed
  // Connections past max_connections that are still taken, for liveness probes and
  // scrapes only: a request on one other than GET /health, /metrics or /worker_status
  // gets 503, and each is closed after its response.
  size_t reserved_connections = 16;
  // A stalled client loses its connection: reading one request (headers and body)
  // may take at most request_timeout; an idle keep-alive connection is closed after
  // keep_alive_timeout; one write may wait at most write_timeout for the client.
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds keep_alive_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  // Bytes a response may have queued for a client that does not read before the
  // connection is dropped as stalled.
  size_t max_buffered_bytes = 64u << 20;
};

using HttpHandler = std::function<void(HttpRequest&&, std::shared_ptr<ResponseWriter>)>;

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; throws Unavailable when the address cannot be bound. Then
  // starts the IO threads; returns at once.
  void start();
  // The bound port (useful with port 0).
  uint16_t port() const;

  // Graceful shutdown, first step: stop accepting and close idle connections;
  // requests in flight continue and their connections close when they end.
  void stop_accepting();
  // Requests whose response has not ended.
  int64_t requests_in_flight() const;
  int64_t open_connections() const;
  // Waits until no request is in flight or the timeout passes; true if none is.
  bool wait_idle(std::chrono::milliseconds timeout) const;
  // Closes every connection and stops the IO threads. Idempotent.
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tachyon::server
