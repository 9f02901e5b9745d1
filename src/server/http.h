// The HTTP/1.1 server's types seen by request handlers: the parsed request and the
// writer a handler answers through. Handlers run on an IO thread and must not block;
// long work (generation) answers later, from any thread, through the writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tachyon::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // "/v1/models"
  std::string query;   // "x=1"
  Headers headers;     // names lower-cased, in arrival order
  std::string body;
  std::string remote_address;
  int version = 11;  // 10 or 11

  // The first header with this (lower-case) name.
  std::optional<std::string_view> header(std::string_view lower_name) const;
};

// Answers one request. Exactly one of respond() or start_stream()...end_stream().
// Every method may be called from any thread; calls after the client is gone are
// dropped. The writer keeps its connection alive until it is destroyed.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // A complete response with Content-Length.
  virtual void respond(int status, std::string_view content_type, std::string body,
                       const Headers& headers = {}) = 0;

  // Starts a streamed response (chunked for HTTP/1.1 clients).
  virtual void start_stream(int status, std::string_view content_type,
                            const Headers& headers = {}) = 0;
  // Queues part of the streamed body. Returns false once the client is gone or it
  // has stopped reading (more than the connection's buffer limit is queued).
  virtual bool write(std::string data) = 0;
  virtual void end_stream() = 0;

  // True once the client disconnected before the response ended.
  virtual bool client_closed() const = 0;
  // Runs fn once (on the connection's executor) if the client disconnects before the
  // response ends; at once if it already has. Never runs after the response ended.
  virtual void on_client_close(std::function<void()> fn) = 0;
  // Bytes accepted by write()/respond() and not yet sent.
  virtual size_t buffered_bytes() const = 0;
  // Runs fn on the connection's executor: calls posted for one request never run
  // concurrently with each other or with on_client_close callbacks.
  virtual void post(std::function<void()> fn) = 0;
};

// Reason phrase for a status code ("Not Found"); "Unknown" for unusual codes.
std::string_view status_reason(int status);

}  // namespace tachyon::server
