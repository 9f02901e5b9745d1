#include "server/http_server.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "server/test_http_client.h"

namespace tachyon::server {
namespace {

using testing::TestConnection;
using testing::TestResponse;

// Waits for a signal from another thread (generous timeout: a hang fails the test
// instead of blocking the suite; nothing is asserted about durations).
class Event {
 public:
  void set() {
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::seconds timeout = std::chrono::seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

HttpServerOptions test_options() {
  HttpServerOptions o;
  o.port = 0;
  o.io_threads = 2;
  return o;
}

void echo(HttpRequest&& req, std::shared_ptr<ResponseWriter> w) {
  std::string body = req.method + " " + req.path + " q=" + req.query + " body=" + req.body;
  if (auto h = req.header("x-test")) body += " x-test=" + std::string(*h);
  w->respond(200, "text/plain", body, {{"X-Reply", "yes"}});
}

TEST(HttpServer, AnswersAndKeepsConnectionAlive) {
  HttpServer server(test_options(), echo);
  server.start();
  ASSERT_NE(server.port(), 0);
  TestConnection c(server.port());
  auto r1 = c.request("GET", "/a/b?x=1", "", {{"X-Test", "v"}});
  EXPECT_EQ(r1.status, 200);
  EXPECT_EQ(r1.body, "GET /a/b q=x=1 body= x-test=v");
  EXPECT_EQ(r1.headers["x-reply"], "yes");
  EXPECT_EQ(r1.headers["content-type"], "text/plain");
  EXPECT_TRUE(r1.keep_alive);
  auto r2 = c.request("POST", "/p", "hello");
  EXPECT_EQ(r2.body, "POST /p q= body=hello");
  server.stop();
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  HttpServer server(test_options(), echo);
  server.start();
  TestConnection c(server.port());
  c.send(
      "POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA"
      "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nB"
      "GET /three HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.read_response().body, "POST /one q= body=A");
  EXPECT_EQ(c.read_response().body, "POST /two q= body=B");
  EXPECT_EQ(c.read_response().body, "GET /three q= body=");
}

TEST(HttpServer, ConnectionCloseIsHonoured) {
  HttpServer server(test_options(), echo);
  server.start();
  TestConnection c(server.port());
  auto r = c.request("GET", "/", "", {{"Connection", "close"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.keep_alive);
  EXPECT_EQ(c.read_until_closed(), "");
}

TEST(HttpServer, RejectsOversizedBodies) {
  auto opt = test_options();
  opt.max_body_bytes = 1000;
  HttpServer server(opt, echo);
  server.start();
  {  // declared length over the limit: refused before the body is read
    TestConnection c(server.port());
    c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
    auto r = c.read_response();
    EXPECT_EQ(r.status, 413);
    EXPECT_NE(r.body.find("1000 bytes"), std::string::npos);
    EXPECT_FALSE(r.keep_alive);
  }
  {  // chunked body growing past the limit
    TestConnection c(server.port());
    std::string chunk(600, 'x');
    c.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n" + chunk +
           "\r\n258\r\n" + chunk + "\r\n0\r\n\r\n");
    EXPECT_EQ(c.read_response().status, 413);
  }
  {  // exactly at the limit is fine
    TestConnection c(server.port());
    EXPECT_EQ(c.request("POST", "/", std::string(1000, 'y')).status, 200);
  }
}

TEST(HttpServer, RejectsMalformedRequestsAndHugeHeaders) {
  auto opt = test_options();
  opt.max_header_bytes = 2048;
  HttpServer server(opt, echo);
  server.start();
  {
    TestConnection c(server.port());
    c.send("THIS IS NOT HTTP\r\n\r\n");
    EXPECT_EQ(c.read_response().status, 400);
  }
  {
    TestConnection c(server.port());
    c.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n");
    EXPECT_EQ(c.read_response().status, 431);
  }
}

TEST(HttpServer, ClosesStalledRequestsAndIdleConnections) {
  auto opt = test_options();
  opt.request_timeout = std::chrono::milliseconds(200);
  opt.keep_alive_timeout = std::chrono::milliseconds(200);
  HttpServer server(opt, echo);
  server.start();
  {  // headers never finish: 408, then closed
    TestConnection c(server.port());
    c.send("GET / HTTP/1.1\r\nHost: x\r\n");
    std::string rest = c.read_until_closed();
    EXPECT_NE(rest.find("408"), std::string::npos) << rest;
  }
  {  // idle after one request: closed quietly
    TestConnection c(server.port());
    EXPECT_EQ(c.request("GET", "/").status, 200);
    EXPECT_EQ(c.read_until_closed(), "");
  }
}

TEST(HttpServer, StreamsChunkedBodies) {
  constexpr int kParts = 20;
  HttpServer server(test_options(), [](HttpRequest&&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    std::thread([w] {
      for (int i = 0; i < kParts; ++i) EXPECT_TRUE(w->write("data: " + std::to_string(i) + "\n\n"));
      w->end_stream();
    }).detach();
  });
  server.start();
  std::string expected;
  for (int i = 0; i < kParts; ++i) expected += "data: " + std::to_string(i) + "\n\n";
  TestConnection c(server.port());
  // The connection is reused after each stream. The writer's parts race the IO thread
  // (direct sends against queued ones); many rounds give a reordering a chance to show.
  for (int round = 0; round < 50; ++round) {
    auto r = c.request("GET", "/s");
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.chunked);
    EXPECT_EQ(r.headers["content-type"], "text/event-stream");
    ASSERT_EQ(r.body, expected) << "round " << round;
  }
}

TEST(HttpServer, StreamsToHttp10ClientsUntilClose) {
  HttpServer server(test_options(), [](HttpRequest&&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/plain");
    w->write("abc");
    w->write("def");
    w->end_stream();
  });
  server.start();
  TestConnection c(server.port());
  c.send("GET / HTTP/1.0\r\n\r\n");
  std::string raw = c.read_until_closed();
  EXPECT_EQ(raw.find("chunked"), std::string::npos) << raw;
  EXPECT_EQ(raw.substr(raw.size() - 6), "abcdef");
}

struct Parked {
  std::mutex mu;
  std::shared_ptr<ResponseWriter> writer;
  Event arrived, closed;
};

HttpHandler parking_handler(Parked& p, bool stream) {
  return [&p, stream](HttpRequest&&, std::shared_ptr<ResponseWriter> w) {
    if (stream) {
      w->start_stream(200, "text/plain");
      w->write("first");
    }
    w->on_client_close([&p] { p.closed.set(); });
    {
      std::lock_guard<std::mutex> lock(p.mu);
      p.writer = w;
    }
    p.arrived.set();
  };
}

TEST(HttpServer, DetectsClientGoneWhileWaitingForAResponse) {
  Parked p;
  HttpServer server(test_options(), parking_handler(p, /*stream=*/false));
  server.start();
  auto c = std::make_unique<TestConnection>(server.port());
  c->send_request("POST", "/", "x");
  ASSERT_TRUE(p.arrived.wait());
  EXPECT_FALSE(p.writer->client_closed());
  c->close();
  ASSERT_TRUE(p.closed.wait());
  EXPECT_TRUE(p.writer->client_closed());
  EXPECT_FALSE(p.writer->write("late"));
  p.writer->respond(200, "text/plain", "too late");  // dropped, no crash
  EXPECT_TRUE(server.wait_idle(std::chrono::seconds(30)));
}

TEST(HttpServer, DetectsClientGoneWhileStreaming) {
  Parked p;
  HttpServer server(test_options(), parking_handler(p, /*stream=*/true));
  server.start();
  auto c = std::make_unique<TestConnection>(server.port());
  c->send_request("GET", "/");
  ASSERT_TRUE(p.arrived.wait());
  c->close();
  ASSERT_TRUE(p.closed.wait());
  EXPECT_TRUE(p.writer->client_closed());
}

TEST(HttpServer, CloseCallbackRegisteredAfterDisconnectRunsAtOnce) {
  Parked p;
  HttpServer server(test_options(), parking_handler(p, false));
  server.start();
  auto c = std::make_unique<TestConnection>(server.port());
  c->send_request("POST", "/", "x");
  ASSERT_TRUE(p.arrived.wait());
  c->close();
  ASSERT_TRUE(p.closed.wait());
  Event late;
  p.writer->on_client_close([&] { late.set(); });
  EXPECT_TRUE(late.wait());
}

TEST(HttpServer, DroppedWriterAnswers500) {
  HttpServer server(test_options(), [](HttpRequest&&, std::shared_ptr<ResponseWriter>) {});
  server.start();
  TestConnection c(server.port());
  EXPECT_EQ(c.request("GET", "/").status, 500);
  EXPECT_EQ(c.request("GET", "/").status, 500);  // and the connection stays usable
}

TEST(HttpServer, HandlerExceptionAnswers500) {
  HttpServer server(test_options(), [](HttpRequest&&, std::shared_ptr<ResponseWriter>) {
    throw std::runtime_error("boom");
  });
  server.start();
  TestConnection c(server.port());
  EXPECT_EQ(c.request("GET", "/").status, 500);
}

TEST(HttpServer, AnswersExpectContinue) {
  HttpServer server(test_options(), echo);
  server.start();
  TestConnection c(server.port());
  c.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  auto interim = c.read_response();
  EXPECT_EQ(interim.status, 100);
  c.send("abc");
  EXPECT_EQ(c.read_response().body, "POST /e q= body=abc");
}

TEST(HttpServer, GracefulShutdownFinishesInFlightRequests) {
  Parked p;
  HttpServer server(test_options(), parking_handler(p, false));
  server.start();
  TestConnection idle(server.port());
  TestConnection busy(server.port());
  busy.send_request("POST", "/", "x");
  ASSERT_TRUE(p.arrived.wait());
  EXPECT_EQ(server.requests_in_flight(), 1);

  server.stop_accepting();
  EXPECT_EQ(idle.read_until_closed(), "");  // idle connections are closed
  EXPECT_FALSE(server.wait_idle(std::chrono::milliseconds(10)));
  p.writer->respond(200, "text/plain", "done");
  auto r = busy.read_response();
  EXPECT_EQ(r.body, "done");
  EXPECT_FALSE(r.keep_alive);  // told to go away
  EXPECT_TRUE(server.wait_idle(std::chrono::seconds(30)));
  EXPECT_THROW(TestConnection late(server.port()), std::exception);
  server.stop();
}

TEST(HttpServer, RefusesConnectionsOverTheLimit) {
  auto opt = test_options();
  opt.max_connections = 1;
  opt.reserved_connections = 0;
  HttpServer server(opt, echo);
  server.start();
  TestConnection first(server.port());
  EXPECT_EQ(first.request("GET", "/").status, 200);
  TestConnection second(server.port());
  std::string raw = second.read_until_closed();
  EXPECT_NE(raw.find("503"), std::string::npos);
  EXPECT_EQ(first.request("GET", "/").status, 200);
}

// Past max_connections a few connections are still taken for liveness probes and
// scrapes; anything else on them gets 503, and each closes after its answer.
TEST(HttpServer, KeepsAReserveForHealthAndMetrics) {
  auto opt = test_options();
  opt.max_connections = 1;
  opt.reserved_connections = 3;  // room for closed connections not yet reaped
  HttpServer server(opt, echo);
  server.start();
  TestConnection first(server.port());
  EXPECT_EQ(first.request("GET", "/").status, 200);
  {
    TestConnection probe(server.port());
    TestResponse r = probe.request("GET", "/health");
    EXPECT_EQ(r.status, 200);
    EXPECT_FALSE(r.keep_alive);  // closed after its answer
  }
  {
    TestConnection other(server.port());
    TestResponse r = other.request("POST", "/v1/completions", "{}");
    EXPECT_EQ(r.status, 503);
    EXPECT_FALSE(r.keep_alive);
  }
  {
    TestConnection metrics(server.port());
    EXPECT_EQ(metrics.request("GET", "/metrics?x=1").status, 200);
  }
  EXPECT_EQ(first.request("GET", "/").status, 200);
}

// RFC 9112 framing a proxy in front may read differently (request smuggling) is refused.
TEST(HttpServer, RefusesAmbiguousFraming) {
  HttpServer server(test_options(), echo);
  server.start();
  auto status_of = [&](const std::string& raw) {
    TestConnection c(server.port());
    c.send(raw);
    return c.read_response().status;
  };
  const std::string body = "5\r\nhello\r\n0\r\n\r\n";
  EXPECT_EQ(
      status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + body),
      400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n" +
                      body),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      "Content-Length: 10\r\n\r\n" +
                      body),
            400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n\r\n"), 400);  // HTTP/1.1 without Host
  // Obsolete line folding (a header continued on the next line), with a space or a tab.
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: x\r\nX-Test: a\r\n b\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX-Test: a\r\n\tb\r\nHost: x\r\n\r\n"), 400);
  {
    // A header that arrives in pieces is still read whole.
    TestConnection c(server.port());
    c.send("GET /split HTTP/1.1\r\nHo");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    c.send("st: x\r\nX-Test: y\r\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    c.send("\r\n");
    TestResponse r = c.read_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("x-test=y"), std::string::npos) << r.body;
  }
  // What stays accepted: one final chunked (any case, with spaces), HTTP/1.0 without Host.
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  Chunked \r\n\r\n" + body),
            200);
  TestConnection old(server.port());
  old.send("GET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.read_response().status, 200);
}

TEST(HttpServer, StalledReaderIsDropped) {
  auto opt = test_options();
  opt.max_buffered_bytes = 1u << 20;
  Event gave_up;
  HttpServer server(opt, [&](HttpRequest&&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "application/octet-stream");
    std::thread([w, &gave_up] {
      std::string block(64 << 10, 'z');
      for (int i = 0; i < 100000; ++i)
        if (!w->write(block)) {
          gave_up.set();
          return;
        }
    }).detach();
  });
  server.start();
  TestConnection c(server.port());
  c.send_request("GET", "/");  // and never read
  EXPECT_TRUE(gave_up.wait());
}

TEST(HttpServer, InvalidAddressIsAClearError) {
  auto opt = test_options();
  opt.host = "not an address";
  HttpServer server(opt, echo);
  EXPECT_THROW(server.start(), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::server
