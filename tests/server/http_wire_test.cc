// The HTTP/1.1 wire rules apart from a connection: framing refused, obs-fold found,
// response heads and chunks written, the reserve connections' routes.
#include "server/http_wire.h"

#include <gtest/gtest.h>

namespace tachyon::server {
namespace {

bhttp::request_header<> request(int version,
                                std::initializer_list<std::pair<const char*, const char*>> fields,
                                const char* target = "/") {
  bhttp::request_header<> h;
  h.version(version);
  h.method(bhttp::verb::post);
  h.target(target);
  for (const auto& [k, v] : fields) h.insert(k, v);
  return h;
}

TEST(HttpWire, FramingErrors) {
  EXPECT_EQ(framing_error(request(11, {{"Host", "x"}})), "");
  EXPECT_EQ(framing_error(request(11, {{"Host", "x"}, {"Transfer-Encoding", " CHUNKED\t"}})), "");
  EXPECT_EQ(framing_error(request(10, {})), "");  // HTTP/1.0 needs no Host
  EXPECT_NE(framing_error(request(11, {})).find("Host"), std::string::npos);
  for (const char* te : {"gzip, chunked", "identity", "chunked, chunked", "chunked,", ""})
    EXPECT_NE(framing_error(request(11, {{"Host", "x"}, {"Transfer-Encoding", te}}))
                  .find("only 'chunked' alone"),
              std::string::npos)
        << te;
  EXPECT_NE(framing_error(request(11, {{"Host", "x"},
                                       {"Transfer-Encoding", "chunked"},
                                       {"Transfer-Encoding", "chunked"}}))
                .find("only 'chunked' alone"),
            std::string::npos);
  EXPECT_NE(
      framing_error(
          request(11, {{"Host", "x"}, {"Transfer-Encoding", "chunked"}, {"Content-Length", "3"}}))
          .find("Content-Length"),
      std::string::npos);
}

TEST(HttpWire, ObsFold) {
  EXPECT_FALSE(has_obs_fold("GET / HTTP/1.1\r\nHost: x\r\nA: b c\r\n"));
  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n"));
  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\nA: b\r\n\tc\r\nHost: x\r\n"));
}

TEST(HttpWire, ResponseHeads) {
  Headers h = {{"X-Ok", "1"}, {"X-Bad", "a\r\nSet-Cookie: y"}, {"Bad:Name", "v"}, {"", "v"}};
  ResponseHead head;
  head.status = 404;
  head.content_type = "application/json";
  head.headers = &h;
  head.content_length = 7;
  EXPECT_EQ(format_head(head),
            "HTTP/1.1 404 Not Found\r\nServer: tachyon\r\nContent-Type: application/json\r\n"
            "X-Ok: 1\r\nContent-Length: 7\r\n\r\n");
  head.content_length.reset();
  head.chunked = true;
  head.keep_alive = false;
  head.headers = nullptr;
  EXPECT_EQ(format_head(head),
            "HTTP/1.1 404 Not Found\r\nServer: tachyon\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  head.chunked = false;
  head.keep_alive = true;
  head.version = 10;
  head.content_length = 0;
  EXPECT_NE(format_head(head).find("Connection: keep-alive\r\n"), std::string::npos);
  EXPECT_EQ(frame_chunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(frame_chunk(std::string(300, 'a')).substr(0, 5), "12c\r\n");
}

TEST(HttpWire, ReserveRoutes) {
  auto get = [](const char* target) {
    auto h = request(11, {{"Host", "x"}}, target);
    h.method(bhttp::verb::get);
    return h;
  };
  EXPECT_TRUE(served_on_reserve(get("/health")));
  EXPECT_TRUE(served_on_reserve(get("/metrics?x=1")));
  EXPECT_TRUE(served_on_reserve(get("/worker_status")));
  EXPECT_FALSE(served_on_reserve(get("/v1/models")));
  EXPECT_FALSE(served_on_reserve(request(11, {{"Host", "x"}}, "/health")));  // POST
}

}  // namespace
}  // namespace tachyon::server
