// Task prompts (generate_config.task_id) and the prefix cache's fields over HTTP, against
// the fake backend: the prompt the model gets, aux_info's prefix_len / input_len /
// reuse_len, OpenAI's usage.prompt_tokens_details.cached_tokens, the 400s, /metrics.
#include <gtest/gtest.h>

#include <thread>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

// A server whose task prompts are {1: "You are terse.", "sum": "Sum up:"}.
struct TaskServer : TestServer {
  TaskServer() {
    auto tasks = parse_task_prompts(
        R"([{"task_id": 1, "prompt": "You are terse."}, {"task_id": "sum", "prompt": "Sum up:"}])",
        "tasks.json");
    prefixes = install_task_prompts(*backend, tasks);
    app->set_backend(backend, prefixes);
  }
  std::vector<int32_t> prefix(const std::string& id) const { return prefixes->find(id)->ids; }
  std::shared_ptr<const TaskPrefixes> prefixes;
};

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TaskPrompts, InstalledAtStartArePinned) {
  TaskServer s;
  auto pinned = s.backend->pinned();
  ASSERT_EQ(pinned.size(), 2u);
  EXPECT_EQ(pinned[0], s.backend->encode("You are terse.", true));
  EXPECT_EQ(pinned[1], s.backend->encode("Sum up:", true));
}

TEST(TaskPrompts, NativeTaskPromptGoesBeforeThePrompt) {
  TaskServer s;
  s.backend->reuse_len = 16;
  Json b = {
      {"prompt", "hello"},
      {"generate_config", {{"max_new_tokens", 3}, {"task_id", 1}, {"return_input_ids", true}}}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200) << r.body;
  // The task prompt (with the BOS a raw prompt gets), then the request's text without one.
  const std::vector<int32_t> own = s.backend->encode("hello", false);
  EXPECT_EQ(s.backend->last_prompt(), concat(s.prefix("1"), own));
  EXPECT_EQ(s.prefix("1").front(), 1);
  Json j = parse(r.body);
  const Json& aux = j["aux_info"];
  EXPECT_EQ(aux["prefix_len"], s.prefix("1").size());  // 15: BOS + 14 bytes
  EXPECT_EQ(aux["input_len"], own.size());             // the request's own tokens only
  EXPECT_EQ(aux["reuse_len"], 16);                     // from the engine
  EXPECT_EQ(j["input_ids"], Json::array({own}));
}

TEST(TaskPrompts, IntegerAndStringIdsAreTheSameTask) {
  TaskServer s;
  Json b = {{"prompt", "x"}, {"generate_config", {{"max_new_tokens", 1}, {"task_id", "1"}}}};
  ASSERT_EQ(s.post("/", b).status, 200);
  EXPECT_EQ(s.backend->last_prompt(), concat(s.prefix("1"), s.backend->encode("x", false)));
  // At the top level too, as every generate_config field.
  Json top = {{"prompt", "x"}, {"max_new_tokens", 1}, {"task_id", "sum"}};
  ASSERT_EQ(s.post("/", top).status, 200);
  EXPECT_EQ(s.backend->last_prompt(), concat(s.prefix("sum"), s.backend->encode("x", false)));
}

TEST(TaskPrompts, WithoutTaskIdNothingIsPutBefore) {
  TaskServer s;
  Json b = {{"prompt", "hello"},
            {"generate_config", {{"max_new_tokens", 2}, {"task_id", nullptr}}}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.backend->last_prompt(), s.backend->encode("hello", true));
  EXPECT_EQ(parse(r.body)["aux_info"]["prefix_len"], 0);
  EXPECT_EQ(parse(r.body)["aux_info"]["input_len"], 6);
}

TEST(TaskPrompts, UnknownTaskIdIs400NamingTheKnownOnes) {
  TaskServer s;
  Json b = {{"prompt", "x"}, {"generate_config", {{"task_id", 2}}}};
  auto r = s.post("/", b);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("task_id 2 is unknown; the configured task ids are: 1, sum"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(s.backend->submitted.load(), 0);
  auto c = s.post("/v1/completions", Json{{"prompt", "x"}, {"task_id", "one"}});
  EXPECT_EQ(c.status, 400);
  EXPECT_EQ(parse(c.body)["error"]["param"], "task_id");
  EXPECT_NE(c.body.find("task_id one is unknown"), std::string::npos) << c.body;
}

TEST(TaskPrompts, TaskIdWithoutTaskPromptsIs400) {
  TestServer s;
  for (const auto& [path, body] : std::vector<std::pair<std::string, Json>>{
           {"/", Json{{"prompt", "x"}, {"generate_config", {{"task_id", 1}}}}},
           {"/v1/completions", Json{{"prompt", "x"}, {"task_id", 1}}},
           {"/v1/chat/completions",
            Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"task_id", 1}}}}) {
    auto r = s.post(path, body);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(r.body.find("task_id 1 is unknown: no task prompts are configured"),
              std::string::npos)
        << path << ": " << r.body;
  }
  EXPECT_EQ(s.backend->submitted.load(), 0);
}

TEST(TaskPrompts, IllTypedTaskIdIs400) {
  TaskServer s;
  for (const Json& id : {Json(1.5), Json(true), Json::array({1}), Json::object()}) {
    auto r = s.post("/", Json{{"prompt", "x"}, {"generate_config", {{"task_id", id}}}});
    EXPECT_EQ(r.status, 400) << id;
    EXPECT_NE(r.body.find("generate_config.task_id must be an integer or a string"),
              std::string::npos)
        << r.body;
    auto c = s.post("/v1/completions", Json{{"prompt", "x"}, {"task_id", id}});
    EXPECT_EQ(c.status, 400) << id;
    EXPECT_NE(c.body.find("task_id must be an integer or a string"), std::string::npos) << c.body;
  }
}

TEST(TaskPrompts, CompletionsCountTheWholePromptAndTheCachedTokens) {
  TaskServer s;
  s.backend->reuse_len = 32;
  auto r = s.post("/v1/completions",
                  Json{{"prompt", "abc"}, {"max_tokens", 2}, {"task_id", "sum"}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<int32_t> own = s.backend->encode("abc", false);
  EXPECT_EQ(s.backend->last_prompt(), concat(s.prefix("sum"), own));
  Json j = parse(r.body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], s.prefix("sum").size() + own.size());
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().rfind("abc", 0), 0u);  // echo: own text
  // Prompts given as ids are used as they are.
  auto ids = s.post("/v1/completions",
                    Json{{"prompt", Json::array({70, 71})}, {"max_tokens", 1}, {"task_id", 1}});
  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(s.backend->last_prompt(), concat(s.prefix("1"), {70, 71}));
}

TEST(TaskPrompts, ChatPutsTheTaskPromptBeforeTheRenderedMessages) {
  TaskServer s;
  s.backend->reuse_len = 16;
  Json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"max_tokens", 2},
            {"task_id", 1},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  auto r = s.post("/v1/chat/completions", b);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<int32_t> rendered = s.backend->encode("user: hi\nassistant:", false);
  EXPECT_EQ(s.backend->last_prompt(), concat(s.prefix("1"), rendered));
  auto events = sse_payloads(r.body);
  ASSERT_GE(events.size(), 2u);
  Json usage = parse(events[events.size() - 2])["usage"];
  EXPECT_EQ(usage["prompt_tokens"], s.prefix("1").size() + rendered.size());
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 16);
}

TEST(TaskPrompts, CachedTokensAreZeroWithoutAHit) {
  TestServer s;
  auto r = s.post("/v1/completions", Json{{"prompt", "ab"}, {"max_tokens", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(TaskPrompts, TheWholePromptMustFitTheWindow) {
  TaskServer s;  // the fake's window: 256 tokens
  std::string text(250, 'x');
  auto r = s.post("/", Json{{"prompt", text}, {"generate_config", {{"task_id", 1}}}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("prompt has 265 tokens"), std::string::npos) << r.body;
  auto c = s.post("/v1/completions", Json{{"prompt", text}, {"task_id", 1}});
  EXPECT_EQ(c.status, 400) << c.body;
  EXPECT_EQ(s.backend->submitted.load(), 0);
}

TEST(PrefixCacheMetrics, ExportedFromTheBackendStats) {
  TestServer s;
  s.backend->prefix_stats.prefix_cache_queries = 1000;
  s.backend->prefix_stats.prefix_cache_hits = 640;
  s.backend->prefix_stats.prefix_cache_host_hits = 128;
  s.backend->prefix_stats.num_cached_blocks = 12;
  s.backend->prefix_stats.num_pinned_blocks = 3;
  auto r = s.get("/metrics");
  ASSERT_EQ(r.status, 200);
  for (const char* needle : {"vllm:prefix_cache_queries_total{model_name=\"fake-model\"} 1000",
                             "tachyon:prefix_cache_queries_total{model_name=\"fake-model\"} 1000",
                             "vllm:prefix_cache_hits_total{model_name=\"fake-model\"} 640",
                             "tachyon:prefix_cache_hits_total{model_name=\"fake-model\"} 640",
                             "tachyon:prefix_cache_host_hits_total{model_name=\"fake-model\"} 128",
                             "tachyon:prefix_cache_cached_blocks{model_name=\"fake-model\"} 12",
                             "tachyon:prefix_cache_pinned_blocks{model_name=\"fake-model\"} 3",
                             "# TYPE vllm:prefix_cache_hits_total counter",
                             "# TYPE tachyon:prefix_cache_pinned_blocks gauge"})
    EXPECT_NE(r.body.find(needle), std::string::npos) << needle;
}

}  // namespace
}  // namespace tachyon::server::testing
