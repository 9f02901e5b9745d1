// The HTTP/1.1 wire format (RFC 9112) apart from any connection: which requests'
// framing a server must refuse, how a response head and a chunk are written, and a
// parsed request as the handlers see it. http_session.cc drives a connection with these.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_internal.h"

namespace tachyon::server {

// What RFC 9112 requires a server to refuse in a request's framing, which a proxy in
// front may read otherwise (request smuggling): a transfer coding other than one final
// "chunked" (no other is decoded), Transfer-Encoding beside Content-Length, and an
// HTTP/1.1 request without Host. Empty when the framing is sound.
std::string framing_error(const bhttp::request_header<>& req);

// Whether a request's raw header block (request line and fields, up to the blank line)
// folds a field over several lines (obs-fold), which the parser would join quietly.
bool has_obs_fold(std::string_view header_block);

struct ResponseHead {
  int status = 200;
  std::string_view content_type;
  const Headers* headers = nullptr;
  std::optional<size_t> content_length;  // unset: chunked (HTTP/1.1) or until close
  bool chunked = false;
  bool keep_alive = true;
  int version = 11;  // of the request: an HTTP/1.0 client is told keep-alive explicitly
};
// The status line and fields, ending with the blank line. Header names or values
// holding CR, LF or NUL (and names with ':') are left out, never written.
std::string format_head(const ResponseHead& head);

// One chunk of a chunked body: size line, data, CRLF.
std::string frame_chunk(const std::string& data);

// A connection taken past max_connections serves only these (liveness probes and
// scrapes): GET /health, /metrics and /worker_status.
bool served_on_reserve(const bhttp::request_header<>& req);
// The body of the 503 that a connection past the limits gets.
extern const std::string_view kBusyBody;

// A parsed request as the handlers see it (header names in lower case).
HttpRequest to_http_request(bhttp::request<bhttp::string_body>&& msg, std::string remote,
                            int version);

}  // namespace tachyon::server
