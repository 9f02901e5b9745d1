// OpenAI tool calling over the fake backend (its output scripted): the tools reach the
// template in the order sent, a named function and "required" constrain the output by a
// JSON Schema and come back as message.tool_calls, "auto" parses the output in the
// model's format (whole and streamed), and bad requests are refused naming the field.
#include <gtest/gtest.h>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

using Kind = grammar::GrammarSpec::Kind;

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather now", "parameters": {"type": "object", "properties":
    {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "strict": true}}])";

std::string chat_with(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "tools": )" +
         std::string(kTools) + extra + "}";
}

// A server whose fake model has room for the tools in its window.
struct ToolServer : TestServer {
  ToolServer() : TestServer(default_options(), false) {
    backend = std::make_shared<FakeBackend>(4096);
    app->set_backend(backend);
  }
};

std::string prompt_text(FakeBackend& b) {
  std::string s;
  for (int32_t id : b.last_prompt()) s += static_cast<char>(id - 3);
  return s;
}

TEST(OpenAITools, ToolsReachTheTemplateInTheOrderSent) {
  ToolServer s;
  auto r = s.post("/v1/chat/completions", chat_with(R"(, "tool_choice": "none")"));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string p = prompt_text(*s.backend);
  EXPECT_NE(p.find(R"("properties":{"city":{"type":"string"},"unit")"), std::string::npos) << p;
  EXPECT_NE(p.find(R"("name":"get_weather","description")"), std::string::npos) << p;
  EXPECT_FALSE(s.backend->last_params().constraint);
  Json j = parse(r.body);
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
}

TEST(OpenAITools, NamedFunctionIsConstrainedToItsArguments) {
  ToolServer s;
  s.backend->script = R"({"city": "Paris"})";
  auto r = s.post(
      "/v1/chat/completions",
      chat_with(R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto c = s.backend->last_params().constraint;
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, Kind::kJsonSchema);
  EXPECT_EQ(c->text.rfind(R"({"type":"object","properties":{"city")", 0), 0u) << c->text;
  Json j = parse(r.body);
  const Json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris"})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");

  // Streamed: the name first, then the arguments in pieces.
  r = s.post("/v1/chat/completions",
             chat_with(R"(, "stream": true, "tool_choice": {"type": "function", "function":
                 {"name": "now"}})"));
  ASSERT_EQ(r.status, 200);
  std::string args, name, finish;
  int pieces = 0;
  for (const std::string& e : sse_payloads(r.body)) {
    if (e == "[DONE]") continue;
    const Json ch = parse(e)["choices"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    if (!ch["delta"].contains("tool_calls")) continue;
    const Json& d = ch["delta"]["tool_calls"][0];
    EXPECT_EQ(d["index"], 0);
    if (d["function"].contains("name")) {
      EXPECT_TRUE(name.empty());
      EXPECT_TRUE(args.empty());
      name = d["function"]["name"];
    }
    args += d["function"]["arguments"].get<std::string>();
    ++pieces;
  }
  EXPECT_EQ(name, "now");
  EXPECT_EQ(args, R"({"city": "Paris"})");
  EXPECT_GT(pieces, 3);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_TRUE(s.backend->last_params().constraint->strict);
}

TEST(OpenAITools, RequiredGivesOneOrMoreCalls) {
  ToolServer s;
  s.backend->script = R"([{"name": "now", "arguments": {}}, {"name": "get_weather",
      "arguments": {"city": "Oslo"}}])";
  auto r = s.post("/v1/chat/completions", chat_with(R"(, "tool_choice": "required")"));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto c = s.backend->last_params().constraint;
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, Kind::kJsonSchema);
  EXPECT_NE(c->text.find(R"("minItems":1)"), std::string::npos);
  EXPECT_EQ(c->text.find("maxItems"), std::string::npos);
  EXPECT_FALSE(c->strict);  // not every function is strict
  Json j = parse(r.body);
  const Json& calls = j["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u) << r.body;
  EXPECT_EQ(calls[0]["function"]["name"], "now");
  EXPECT_EQ(calls[1]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  r = s.post("/v1/chat/completions",
             chat_with(R"(, "tool_choice": "required", "parallel_tool_calls": false)"));
  EXPECT_NE(s.backend->last_params().constraint->text.find(R"("maxItems":1)"), std::string::npos);
}

TEST(OpenAITools, AutoParsesTheModelsFormat) {
  ToolServer s;
  // Without a parser, and a template that does not tell one: refused.
  auto r = s.post("/v1/chat/completions", chat_with(""));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(parse(r.body)["error"]["param"], "tool_choice");
  s.backend->set_tool_call_format(ToolCallFormat::kHermes);
  s.backend->script =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Rome\"}}\n</tool_call>";
  r = s.post("/v1/chat/completions", chat_with(""));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(s.backend->last_params().constraint);
  Json j = parse(r.body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Checking.");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"({"city":"Rome"})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");

  r = s.post("/v1/chat/completions", chat_with(R"(, "stream": true)"));
  std::string content, name, args, finish;
  for (const std::string& e : sse_payloads(r.body)) {
    if (e == "[DONE]") continue;
    const Json ch = parse(e)["choices"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (ch["delta"].contains("tool_calls")) {
      const Json& f = ch["delta"]["tool_calls"][0]["function"];
      if (f.contains("name")) name = f["name"];
      args += f["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Checking.\n");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, R"({"city":"Rome"})");
  EXPECT_EQ(finish, "tool_calls");

  // Plain text stays content, finish_reason stop.
  s.backend->script = "No tools needed.";
  j = parse(s.post("/v1/chat/completions", chat_with("")).body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "No tools needed.");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAITools, AcceptsToolMessagesAndRefusesBadRequests) {
  ToolServer s;
  Json b = Json::parse(chat_with(R"(, "tool_choice": "none")"));
  b["messages"] = Json::parse(R"([{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "20C"}])");
  ASSERT_EQ(s.post("/v1/chat/completions", b).status, 200);
  struct Bad {
    const char* patch;
    const char* param;
  };
  const Bad bad[] = {
      {R"({"tools": {"type": "function"}})", "tools"},
      {R"({"tools": [{"type": "retrieval"}]})", "tools[0].type"},
      {R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]})",
       "tools[0].function.parameters"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function",
          "function": {"name": "a"}}]})",
       "tools[1].function.name"},
      {R"({"tool_choice": {"type": "function", "function": {"name": "nope"}}})",
       "tool_choice.function.name"},
      {R"({"tool_choice": "sometimes"})", "tool_choice"},
      {R"({"tools": null, "tool_choice": "required"})", "tool_choice"},
      {R"({"tool_choice": "required", "response_format": {"type": "json_object"}})", "tool_choice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters":
          {"type": "object", "properties": {"x": {"not": {}}}}}}], "tool_choice": "required"})",
       "tools"},
      {R"({"functions": [{"name": "a"}]})", "functions"},
  };
  for (const Bad& x : bad) {
    Json body = Json::parse(chat_with(""));
    body.merge_patch(Json::parse(x.patch));
    auto r = s.post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << x.patch << " " << r.body;
    EXPECT_EQ(parse(r.body)["error"]["param"], x.param) << x.patch << " " << r.body;
  }
}

}  // namespace
}  // namespace tachyon::server::testing
