#include "server/http_server.h"

#include <pthread.h>
#include <algorithm>

#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "server/http_internal.h"
#include "server/http_wire.h"

namespace tachyon::server {

std::optional<std::string_view> HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return std::string_view(value);
  return std::nullopt;
}

std::string_view status_reason(int status) {
  if (status == 499) return "Client Closed Request";
  auto reason = bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(status)));
  if (reason.empty() || reason == "<unknown-status>") return "Unknown";
  return std::string_view(reason.data(), reason.size());
}

struct HttpServer::Impl {
  ServerShared shared;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::strand<net::io_context::executor_type>> accept_strand;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  uint16_t port = 0;
  bool started = false, stopped = false;

  void accept() {
    acceptor->async_accept(
        net::make_strand(*shared.ioc),
        net::bind_executor(*accept_strand, [this](ErrorCodeT ec, tcp::socket socket) {
          if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
          if (!ec) {
            ErrorCodeT ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            const auto open = static_cast<size_t>(shared.connections.load());
            if (open >= shared.options.max_connections + shared.options.reserved_connections) {
              static const std::string kBusy =
                  "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                  "Content-Length: " +
                  std::to_string(kBusyBody.size()) + "\r\nConnection: close\r\n\r\n" +
                  std::string(kBusyBody);
              net::write(socket, net::buffer(kBusy), ignored);
              socket.shutdown(tcp::socket::shutdown_both, ignored);
              socket.close(ignored);
            } else {
              start_session(std::move(socket), &shared, open >= shared.options.max_connections);
            }
          } else {
            log_warning("http: accept failed: {}", ec.message());
          }
          accept();
        }));
  }

  std::vector<std::shared_ptr<Session>> live_sessions() {
    std::vector<std::shared_ptr<Session>> out;
    std::lock_guard<std::mutex> lock(shared.mu);
    for (auto& [ptr, weak] : shared.sessions)
      if (auto s = weak.lock()) out.push_back(std::move(s));
    return out;
  }
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_shared<Impl>()) {
  impl_->shared.options = std::move(options);
  impl_->shared.handler = std::move(handler);
  impl_->shared.ioc.emplace(std::max(1, impl_->shared.options.io_threads));
}

HttpServer::~HttpServer() {
  stop();
  // Destroying the context destroys handlers that never ran, and with them the last
  // references to their connections.
  impl_->accept_strand.reset();
  impl_->acceptor.reset();
  impl_->shared.ioc.reset();
}

void HttpServer::start() {
  TACHYON_CHECK(!impl_->started, "HttpServer::start called twice");
  auto& ioc = *impl_->shared.ioc;
  const auto& opt = impl_->shared.options;
  ErrorCodeT ec;
  auto address = net::ip::make_address(opt.host, ec);
  if (ec) raise<InvalidArgument>("invalid listen address '{}': {}", opt.host, ec.message());
  tcp::endpoint endpoint(address, opt.port);
  impl_->accept_strand.emplace(net::make_strand(ioc));
  impl_->acceptor.emplace(*impl_->accept_strand);
  auto& acc = *impl_->acceptor;
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec) raise<Unavailable>("cannot listen on {}:{}: {}", opt.host, opt.port, ec.message());
  impl_->port = acc.local_endpoint().port();
  impl_->started = true;
  impl_->work.emplace(net::make_work_guard(ioc));
  net::post(*impl_->accept_strand, [impl = impl_.get()] { impl->accept(); });
  for (int i = 0; i < std::max(1, opt.io_threads); ++i)
    impl_->threads.emplace_back([&ioc] {
      pthread_setname_np(pthread_self(), "http-io");
      for (;;) {
        try {
          ioc.run();
          return;
        } catch (const std::exception& e) {
          log_error("http: IO thread caught: {}", e.what());
        }
      }
    });
}

uint16_t HttpServer::port() const {
  return impl_->port;
}

void HttpServer::stop_accepting() {
  if (!impl_->started || impl_->shared.shutting_down.exchange(true)) return;
  net::post(*impl_->accept_strand, [impl = impl_.get()] {
    ErrorCodeT ec;
    impl->acceptor->close(ec);
  });
  for (auto& s : impl_->live_sessions()) session_shutdown_when_idle(s);
}

int64_t HttpServer::requests_in_flight() const {
  return impl_->shared.in_flight.load();
}
int64_t HttpServer::open_connections() const {
  return impl_->shared.connections.load();
}

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->shared.idle_mu);
  return impl_->shared.idle_cv.wait_for(lock, timeout,
                                        [&] { return impl_->shared.in_flight.load() <= 0; });
}

void HttpServer::stop() {
  if (!impl_->started || impl_->stopped) return;
  impl_->stopped = true;
  stop_accepting();
  for (auto& s : impl_->live_sessions()) session_force_close(s);
  impl_->work.reset();
  // Let the closes run, then stop whatever is left (connections kept by writers).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (impl_->shared.connections.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->shared.ioc->stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace tachyon::server
