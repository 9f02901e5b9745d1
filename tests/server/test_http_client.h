// A blocking HTTP/1.1 client over one TCP connection, for tests: send raw bytes or
// requests, read responses (chunked bodies decoded), observe the server closing.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <map>
#include <string>
#include <string_view>

namespace tachyon::server::testing {

struct TestResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool keep_alive = true;
  bool chunked = false;
};

class TestConnection {
 public:
  explicit TestConnection(uint16_t port, int recv_timeout_s = 60) : socket_(ioc_) {
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    timeval tv{recv_timeout_s, 0};
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  void send(std::string_view raw) { boost::asio::write(socket_, boost::asio::buffer(raw)); }

  void send_request(std::string_view method, std::string_view target, std::string_view body = {},
                    const std::map<std::string, std::string>& headers = {}) {
    std::string req =
        std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: test\r\n";
    for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
    if (!body.empty() || method == "POST")
      req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    req += "\r\n";
    req += body;
    send(req);
  }

  TestResponse read_response() {
    namespace http = boost::beast::http;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1u << 30);
    http::read(socket_, buffer_, parser);
    auto& msg = parser.get();
    TestResponse r;
    r.status = static_cast<int>(msg.result_int());
    for (const auto& f : msg) {
      std::string name(f.name_string().data(), f.name_string().size());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = std::string(f.value().data(), f.value().size());
    }
    r.body = msg.body();
    r.keep_alive = msg.keep_alive();
    r.chunked = msg.chunked();
    return r;
  }

  TestResponse request(std::string_view method, std::string_view target, std::string_view body = {},
                       const std::map<std::string, std::string>& headers = {}) {
    send_request(method, target, body, headers);
    return read_response();
  }

  // Reads until the server closes the connection; returns what arrived meanwhile.
  // Throws if the receive timeout passes first.
  std::string read_until_closed() {
    std::string out(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    char buf[4096];
    for (;;) {
      boost::system::error_code ec;
      size_t n = socket_.read_some(boost::asio::buffer(buf), ec);
      out.append(buf, n);
      if (ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset) return out;
      if (ec) throw boost::system::system_error(ec);
    }
  }

  // Reads whatever arrives next (at least one byte; empty at end of stream).
  std::string read_some() {
    if (buffer_.size() > 0) {
      std::string out(static_cast<const char*>(buffer_.data().data()), buffer_.size());
      buffer_.consume(buffer_.size());
      return out;
    }
    char buf[4096];
    boost::system::error_code ec;
    size_t n = socket_.read_some(boost::asio::buffer(buf), ec);
    if (ec && ec != boost::asio::error::eof) throw boost::system::system_error(ec);
    return std::string(buf, n);
  }

  void shutdown_write() { socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_send); }
  void close() {
    boost::system::error_code ec;
    socket_.close(ec);
  }

 private:
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

}  // namespace tachyon::server::testing
