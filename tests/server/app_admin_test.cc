// Health, status, metrics, models, tokenizer endpoints, routing and API keys.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

TEST(AdminApi, HealthFollowsTheBackend) {
  TestServer s(TestServer::default_options(), /*with_backend=*/false);
  auto r = s.get("/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(parse(r.body)["status"], "loading");
  EXPECT_EQ(s.post("/v1/completions", Json{{"prompt", "x"}}).status, 503);
  s.app->set_backend(s.backend);
  r = s.get("/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(parse(r.body), Json({{"status", "ok"}}));
  EXPECT_EQ(s.post("/health", std::string()).status, 200);
  s.backend->dead = true;
  r = s.get("/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(parse(r.body)["status"], "dead");
  EXPECT_EQ(s.post("/v1/completions", Json{{"prompt", "x"}}).status, 503);
  s.backend->dead = false;
  s.app->begin_shutdown();
  EXPECT_EQ(s.get("/health").status, 503);
  EXPECT_EQ(s.post("/v1/completions", Json{{"prompt", "x"}}).status, 503);
}

TEST(AdminApi, WorkerStatusAndModels) {
  TestServer s;
  Json ws = parse(s.get("/worker_status").body);
  EXPECT_EQ(ws["alive"], true);
  EXPECT_EQ(ws["available_concurrency"], 64);
  EXPECT_EQ(ws["total_kv_cache"], 1600);
  Json models = parse(s.get("/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "fake-model");
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
  // The served name, never the model's filesystem path.
  EXPECT_EQ(models["data"][0]["root"], "fake-model");
  EXPECT_EQ(models.dump().find("/models/fake"), std::string::npos);
  EXPECT_EQ(parse(s.get("/v1/models/fake-model").body)["id"], "fake-model");
  EXPECT_EQ(s.get("/v1/models/other").status, 404);
}

TEST(AdminApi, MetricsAfterRequests) {
  TestServer s;
  ASSERT_EQ(s.post("/v1/completions", Json{{"prompt", "ab"}, {"max_tokens", 4}}).status, 200);
  // The request leaves the running count just after its response is sent: wait for it.
  const std::string idle = "vllm:num_requests_running{model_name=\"fake-model\"} 0";
  auto r = s.get("/metrics");
  for (int i = 0; i < 500 && r.body.find(idle) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = s.get("/metrics");
  }
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"].rfind("text/plain; version=0.0.4", 0), 0u);
  const std::string& m = r.body;
  for (const char* needle :
       {"vllm:num_requests_running{model_name=\"fake-model\"} 0",
        "tachyon:prompt_tokens_total{model_name=\"fake-model\"} 3",
        "vllm:generation_tokens_total{model_name=\"fake-model\"} 4",
        "vllm:time_to_first_token_seconds_count{model_name=\"fake-model\"} 1",
        "vllm:inter_token_latency_seconds_count{model_name=\"fake-model\"} 3",
        "vllm:e2e_request_latency_seconds_count{model_name=\"fake-model\"} 1",
        "vllm:request_success_total{model_name=\"fake-model\",finished_reason=\"length\"} 1",
        "tachyon:http_requests_total{route=\"/v1/completions\",status=\"200\"} 1",
        "# TYPE vllm:time_to_first_token_seconds histogram"})
    EXPECT_NE(m.find(needle), std::string::npos) << needle << "\n" << m;
}

TEST(AdminApi, TokenizeAndDetokenize) {
  TestServer s;
  Json t = parse(s.post("/tokenize", Json{{"prompt", "ab"}, {"return_token_strs", true}}).body);
  EXPECT_EQ(t["tokens"], Json::array({1, 'a' + 3, 'b' + 3}));
  EXPECT_EQ(t["token_ids"], t["tokens"]);
  EXPECT_EQ(t["count"], 3);
  EXPECT_EQ(t["max_model_len"], 256);
  EXPECT_EQ(t["token_strs"], Json::array({"<s>", "a", "b"}));
  Json nt = parse(s.post("/tokenize", Json{{"prompt", "ab"}, {"add_special_tokens", false}}).body);
  EXPECT_EQ(nt["count"], 2);
  Json chat = parse(
      s.post("/tokenize", Json{{"messages", Json::array({{{"role", "user"}, {"content", "q"}}})}})
          .body);
  EXPECT_EQ(chat["count"], std::string("user: q\nassistant:").size());
  Json d = parse(s.post("/detokenize", Json{{"tokens", Json::array({'h' + 3, 'i' + 3})}}).body);
  EXPECT_EQ(d["prompt"], "hi");
  EXPECT_EQ(s.post("/detokenize", Json{{"tokens", "nope"}}).status, 400);
  EXPECT_EQ(s.post("/tokenize", Json{{"text", "x"}}).status, 400);
  Json enc = parse(s.post("/tokenizer/encode", Json{{"prompt", "hi"}}).body);
  EXPECT_EQ(enc["token_ids"], Json::array({1, 'h' + 3, 'i' + 3}));
  EXPECT_EQ(enc["tokens"], Json::array({"<s>", "h", "i"}));
}

TEST(AdminApi, UnknownRoutesAndMethods) {
  TestServer s;
  auto r = s.get("/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(parse(r.body)["error"]["message"].is_string());
  r = s.get("/v1/chat/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "POST");
  EXPECT_FALSE(r.headers["x-request-id"].empty());
}

TEST(AdminApi, ApiKeysGuardEverythingButHealth) {
  auto opt = TestServer::default_options();
  opt.api_keys = {"key-one", "key-two"};
  TestServer s(opt);
  EXPECT_EQ(s.get("/health").status, 200);
  auto r = s.get("/v1/models");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(parse(r.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(s.get("/v1/models", {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(s.get("/v1/models", {{"Authorization", "Bearer key-on"}}).status, 401);
  EXPECT_EQ(s.get("/v1/models", {{"Authorization", "Bearer key-one-"}}).status, 401);
  EXPECT_EQ(s.get("/v1/models", {{"Authorization", "key-one"}}).status, 401);
  EXPECT_EQ(s.get("/v1/models", {{"Authorization", "Bearer key-one"}}).status, 200);
  EXPECT_EQ(s.get("/v1/models", {{"Authorization", "bearer key-two"}}).status, 200);
  EXPECT_EQ(s.get("/metrics").status, 401);
  EXPECT_EQ(s.post("/", Json{{"prompt", "x"}}).status, 401);
  EXPECT_EQ(parse(s.post("/", Json{{"prompt", "x"}}).body)["error_code"], 507);
  // The key is asked for before anything is said about routes or methods.
  EXPECT_EQ(s.get("/no/such/route").status, 401);
  EXPECT_EQ(s.get("/v1/chat/completions").status, 401);
  EXPECT_EQ(s.get("/no/such/route", {{"Authorization", "Bearer key-one"}}).status, 404);
  EXPECT_EQ(s.get("/v1/chat/completions", {{"Authorization", "Bearer key-one"}}).status, 405);
  EXPECT_EQ(s.post("/health", std::string("{}")).status, 200);  // public route, any key
}

}  // namespace
}  // namespace tachyon::server::testing
