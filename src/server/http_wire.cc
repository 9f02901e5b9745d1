#include "server/http_wire.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace tachyon::server {
namespace {

bool header_text_ok(std::string_view s) {
  return std::none_of(s.begin(), s.end(),
                      [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string framing_error(const bhttp::request_header<>& req) {
  std::string codings;
  size_t te_fields = 0;
  for (const auto& f : req)
    if (f.name() == bhttp::field::transfer_encoding) {
      if (te_fields++ > 0) codings += ',';
      codings.append(f.value().data(), f.value().size());
    }
  if (te_fields > 0) {
    std::vector<std::string_view> list;
    std::string_view rest = codings;
    while (true) {
      const size_t comma = rest.find(',');
      list.push_back(trim_ows(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (list.size() != 1 ||
        !beast::iequals(beast::string_view(list[0].data(), list[0].size()), "chunked"))
      return "Transfer-Encoding '" + codings + "' is not supported: only 'chunked' alone";
    if (req.count(bhttp::field::content_length) > 0)
      return "Transfer-Encoding and Content-Length must not both be given";
  }
  if (req.version() == 11 && req.count(bhttp::field::host) == 0)
    return "an HTTP/1.1 request needs a Host header";
  return {};
}

bool has_obs_fold(std::string_view header_block) {
  // A line of the block that starts with a space or a tab continues the line before.
  return header_block.find("\r\n ") != std::string_view::npos ||
         header_block.find("\r\n\t") != std::string_view::npos;
}

std::string format_head(const ResponseHead& head) {
  std::string h = "HTTP/1.1 " + std::to_string(head.status) + " " +
                  std::string(status_reason(head.status)) + "\r\n";
  h += "Server: tachyon\r\n";
  if (!head.content_type.empty() && header_text_ok(head.content_type)) {
    h += "Content-Type: ";
    h += head.content_type;
    h += "\r\n";
  }
  if (head.headers != nullptr)
    for (const auto& [name, value] : *head.headers) {
      if (!header_text_ok(name) || !header_text_ok(value) || name.empty() ||
          name.find(':') != std::string::npos)
        continue;
      h += name + ": " + value + "\r\n";
    }
  if (head.content_length) {
    h += "Content-Length: " + std::to_string(*head.content_length) + "\r\n";
  } else if (head.chunked) {
    h += "Transfer-Encoding: chunked\r\n";
  }
  if (!head.keep_alive) {
    h += "Connection: close\r\n";
  } else if (head.version == 10) {
    h += "Connection: keep-alive\r\n";
  }
  h += "\r\n";
  return h;
}

std::string frame_chunk(const std::string& data) {
  char size_line[24];
  int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
  std::string framed;
  framed.reserve(data.size() + static_cast<size_t>(n) + 2);
  framed.append(size_line, static_cast<size_t>(n));
  framed.append(data);
  framed.append("\r\n");
  return framed;
}

const std::string_view kBusyBody =
    R"({"error":{"message":"too many open connections","type":"server_error","param":null,"code":503}})";

bool served_on_reserve(const bhttp::request_header<>& req) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  return req.method() == bhttp::verb::get &&
         (path == "/health" || path == "/metrics" || path == "/worker_status");
}

HttpRequest to_http_request(bhttp::request<bhttp::string_body>&& msg, std::string remote,
                            int version) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  auto q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& f : msg)
    req.headers.emplace_back(
        to_lower(std::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value()));
  req.body = std::move(msg.body());
  req.remote_address = std::move(remote);
  req.version = version;
  return req;
}

}  // namespace tachyon::server
