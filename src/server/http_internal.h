// Internal to the HTTP server: the state its connections share, and the connections.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>  // before Boost: asio's awaitable.hpp uses std::exchange unincluded

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/http_server.h"

namespace tachyon::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using ErrorCodeT = boost::system::error_code;

class Session;

// State shared by the server and its connections; owned by HttpServer::Impl.
struct ServerShared {
  HttpServerOptions options;
  HttpHandler handler;
  std::optional<net::io_context> ioc;
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> connections{0};
  std::atomic<bool> shutting_down{false};
  std::mutex mu;
  mutable std::condition_variable idle_cv;
  mutable std::mutex idle_mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;

  void request_ended() {
    if (in_flight.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(idle_mu);
      idle_cv.notify_all();
    }
  }
};

// Starts serving a freshly accepted connection; a `reserve` one (taken past
// max_connections) serves only the health and metrics routes.
void start_session(tcp::socket socket, ServerShared* shared, bool reserve);
// Server shutdown: close the connection if it is idle, else once its response ends.
void session_shutdown_when_idle(const std::shared_ptr<Session>& s);
// Closes the connection now (its request, if any, sees the client gone).
void session_force_close(const std::shared_ptr<Session>& s);

}  // namespace tachyon::server
