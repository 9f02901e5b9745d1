// Admission limits, client disconnects and shutdown, end to end over HTTP.
#include <gtest/gtest.h>

#include <thread>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

// Polls a condition another thread makes true (a hang fails after the deadline;
// nothing is asserted about how long it took).
template <typename F>
bool eventually(F f) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return f();
}

std::string long_request(bool stream, int max_tokens = 200) {
  return Json{{"prompt", "x"}, {"max_tokens", max_tokens}, {"stream", stream}}.dump();
}

TEST(Protection, OverCapacityIsRefusedAtOnce) {
  auto opt = TestServer::default_options();
  opt.max_concurrency = 1;
  opt.max_queued = 1;
  TestServer s(opt);
  s.backend->step_delay_ms = 5;
  TestConnection a(s.http->port()), b(s.http->port());
  a.send_request("POST", "/v1/completions", long_request(false, 20));
  ASSERT_TRUE(eventually([&] { return s.backend->submitted.load() == 1; }));
  b.send_request("POST", "/v1/completions", long_request(false, 20));
  ASSERT_TRUE(eventually([&] { return s.app->admission().queued() == 1; }));
  auto r = s.post("/v1/completions", long_request(false, 20));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(parse(r.body)["error"]["code"], "rate_limit_exceeded");
  // The admitted and the queued request both complete.
  EXPECT_EQ(a.read_response().status, 200);
  EXPECT_EQ(b.read_response().status, 200);
  EXPECT_EQ(s.backend->submitted.load(), 2);
  EXPECT_NE(s.get("/metrics").body.find("tachyon:requests_rejected_total{reason=\"capacity\"} 1"),
            std::string::npos);
}

TEST(Protection, DisconnectWhileStreamingCancels) {
  TestServer s;
  s.backend->step_delay_ms = 5;
  {
    TestConnection c(s.http->port());
    c.send_request("POST", "/v1/completions", long_request(true));
    EXPECT_FALSE(c.read_some().empty());
  }  // closed
  ASSERT_TRUE(eventually([&] { return s.backend->cancelled.load() == 1; }));
  ASSERT_TRUE(
      eventually([&] { return s.backend->active.load() == 0 && s.app->active_calls() == 0; }));
}

TEST(Protection, DisconnectWhileWaitingForAWholeResponseCancels) {
  TestServer s;
  s.backend->step_delay_ms = 5;
  {
    TestConnection c(s.http->port());
    c.send_request("POST", "/", Json{{"prompt", "x"}, {"max_new_tokens", 1000}}.dump());
    ASSERT_TRUE(eventually([&] { return s.backend->submitted.load() == 1; }));
  }
  ASSERT_TRUE(eventually([&] { return s.backend->cancelled.load() == 1; }));
  ASSERT_TRUE(eventually([&] { return s.app->active_calls() == 0; }));
}

TEST(Protection, DisconnectWhileQueuedWithdraws) {
  auto opt = TestServer::default_options();
  opt.max_concurrency = 1;
  TestServer s(opt);
  s.backend->step_delay_ms = 5;
  TestConnection a(s.http->port());
  a.send_request("POST", "/v1/completions", long_request(false, 40));
  ASSERT_TRUE(eventually([&] { return s.backend->submitted.load() == 1; }));
  {
    TestConnection b(s.http->port());
    b.send_request("POST", "/v1/completions", long_request(false, 40));
    ASSERT_TRUE(eventually([&] { return s.app->admission().queued() == 1; }));
  }
  ASSERT_TRUE(eventually([&] { return s.app->admission().queued() == 0; }));
  EXPECT_EQ(a.read_response().status, 200);
  EXPECT_EQ(s.backend->submitted.load(), 1);  // the withdrawn request never reached the engine
  ASSERT_TRUE(eventually([&] { return s.app->active_calls() == 0; }));
}

TEST(Protection, ShutdownEndsRunningStreamsWithAnError) {
  TestServer s;
  s.backend->step_delay_ms = 5;
  TestConnection c(s.http->port());
  c.send_request(
      "POST", "/v1/chat/completions",
      Json{{"messages", Json::array({{{"role", "user"}, {"content", "q"}}})}, {"stream", true}}
          .dump());
  ASSERT_TRUE(eventually([&] { return s.backend->submitted.load() == 1; }));
  s.app->begin_shutdown();
  s.app->cancel_all();
  auto r = c.read_response();
  auto events = sse_payloads(r.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json err = parse(events[events.size() - 2]);
  EXPECT_EQ(err["error"]["code"], "service_unavailable");
}

// Chat templates render on the work pool, not on the HTTP threads: a render that takes
// long holds up nothing else, counts as a request in flight, and stops when its client
// leaves, when the server shuts down, or at --render-timeout.
TEST(Protection, RendersRunOffTheHttpThreadsAndStopWhenAsked) {
  auto opt = TestServer::default_options();
  opt.render_timeout = std::chrono::milliseconds(300000);
  TestServer s(opt);
  s.backend->slow_render = true;
  const std::string chat =
      Json{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}}.dump();
  {
    TestConnection c(s.http->port());
    c.send_request("POST", "/v1/chat/completions", chat);
    ASSERT_TRUE(eventually([&] { return s.backend->renders_started.load() == 1; }));
    // Both HTTP threads are free: two more requests are answered while it renders.
    EXPECT_EQ(s.get("/health").status, 200);
    EXPECT_EQ(s.get("/v1/models").status, 200);
    EXPECT_EQ(s.app->active_calls(), 1);
  }  // the client leaves
  ASSERT_TRUE(eventually([&] { return s.backend->renders_stopped.load() == 1; }));
  ASSERT_TRUE(eventually([&] { return s.app->active_calls() == 0; }));

  TestConnection c(s.http->port());
  c.send_request("POST", "/v1/chat/completions", chat);
  ASSERT_TRUE(eventually([&] { return s.backend->renders_started.load() == 2; }));
  s.app->begin_shutdown();
  EXPECT_EQ(c.read_response().status, 503);
  EXPECT_EQ(s.backend->renders_stopped.load(), 2);
  EXPECT_EQ(s.backend->submitted.load(), 0);
}

TEST(Protection, RenderTimeoutIsABadRequest) {
  auto opt = TestServer::default_options();
  opt.render_timeout = std::chrono::milliseconds(50);
  TestServer s(opt);
  s.backend->slow_render = true;
  auto r = s.post("/v1/chat/completions",
                  Json{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(s.backend->renders_stopped.load(), 1);
  s.backend->slow_render = false;
  EXPECT_EQ(s.post("/v1/chat/completions",
                   Json{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})},
                        {"max_tokens", 2}})
                .status,
            200);
}

}  // namespace
}  // namespace tachyon::server::testing
