// The OpenAI endpoints end to end over HTTP, against the fake backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

Json chat_body(int max_tokens = 5) {
  return Json{{"model", "fake-model"},
              {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})},
              {"max_tokens", max_tokens},
              {"seed", 3}};
}

TEST(OpenAIChat, CompletesWithUsage) {
  TestServer s;
  auto r = s.post("/v1/chat/completions", chat_body(5));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/json");
  Json j = parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], FakeBackend::expected_text(3, 0, 5));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  // The prompt is the fake template's rendering, without BOS (the template has it).
  std::string rendered = "user: hi\nassistant:";
  EXPECT_EQ(s.backend->last_prompt().size(), rendered.size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], rendered.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], rendered.size() + 5);
  auto p = s.backend->last_params();
  EXPECT_EQ(p.max_new_tokens, 5);
  EXPECT_EQ(p.random_seed, 3u);
}

// "</s>" is the fake's special token: written in a message it is text (4 byte tokens),
// unless the server allows special tokens in content; in a raw prompt it is one token.
TEST(OpenAIChat, SpecialTokensInContentAreText) {
  Json body = chat_body(2);
  body["messages"][0]["content"] = "a</s>b";
  const std::string rendered = "user: a</s>b\nassistant:";
  {
    TestServer s;
    auto r = s.post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(parse(r.body)["usage"]["prompt_tokens"], rendered.size());
    const std::vector<int32_t> prompt = s.backend->last_prompt();
    EXPECT_EQ(std::count(prompt.begin(), prompt.end(), 2), 0);
    auto t =
        s.post("/tokenize", Json{{"messages", body["messages"]}, {"add_generation_prompt", true}});
    ASSERT_EQ(t.status, 200) << t.body;
    EXPECT_EQ(parse(t.body)["count"], rendered.size());
    Json completion = {{"model", "fake-model"}, {"prompt", "a</s>b"}, {"max_tokens", 2}};
    auto c = s.post("/v1/completions", completion);
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(parse(c.body)["usage"]["prompt_tokens"], 4);  // <s> a </s> b
  }
  AppOptions allow = TestServer::default_options();
  allow.special_tokens_in_content = true;
  TestServer s(allow);
  auto r = s.post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse(r.body)["usage"]["prompt_tokens"], rendered.size() - 3);
  const std::vector<int32_t> prompt = s.backend->last_prompt();
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), 2), 1);
}

TEST(OpenAIChat, PassesSamplingParameters) {
  TestServer s;
  Json b = chat_body(4);
  b["temperature"] = 0.5;
  b["top_p"] = 0.9;
  b["presence_penalty"] = 0.25;
  b["frequency_penalty"] = -0.5;
  b["logit_bias"] = {{"10", -100}, {"5", 2.5}};
  b["stop"] = "x";
  b["top_k"] = 7;
  b["user"] = "someone";
  b["max_completion_tokens"] = 3;  // wins over max_tokens
  ASSERT_EQ(s.post("/v1/chat/completions", b).status, 200);
  auto p = s.backend->last_params();
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.5f);
  ASSERT_EQ(p.logit_bias.size(), 2u);
  EXPECT_EQ(p.logit_bias[0], std::make_pair(5, 2.5f));
  EXPECT_EQ(p.logit_bias[1], std::make_pair(10, -100.0f));
  EXPECT_EQ(p.stop_words_str, std::vector<std::string>{"x"});
  EXPECT_EQ(p.top_k, 7);
  EXPECT_EQ(p.max_new_tokens, 3);
}

TEST(OpenAIChat, StreamsChunksUsageAndDone) {
  TestServer s;
  Json b = chat_body(6);
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  auto r = s.post("/v1/chat/completions", b);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  auto events = sse_payloads(r.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json first = parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  std::string finish;
  std::string id = first["id"];
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    Json c = parse(events[i]);
    EXPECT_EQ(c["id"], id);
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null()) << events[i];
    ASSERT_EQ(c["choices"].size(), 1u);
    const Json& ch = c["choices"][0];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(content, FakeBackend::expected_text(3, 0, 6));
  EXPECT_EQ(finish, "length");
  Json usage_chunk = parse(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 6);
}

TEST(OpenAIChat, StreamsWithoutUsageByDefault) {
  TestServer s;
  Json b = chat_body(3);
  b["stream"] = true;
  auto events = sse_payloads(s.post("/v1/chat/completions", b).body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_FALSE(parse(events[i]).contains("usage"));
}

TEST(OpenAIChat, SeveralChoicesCarryTheirIndex) {
  TestServer s;
  Json b = chat_body(4);
  b["n"] = 3;
  Json j = parse(s.post("/v1/chat/completions", b).body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["message"]["content"], FakeBackend::expected_text(3, i, 4));
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  b["stream"] = true;
  auto events = sse_payloads(s.post("/v1/chat/completions", b).body);
  std::map<int, std::string> texts;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json c = parse(events[i]);
    int idx = c["choices"][0]["index"];
    if (c["choices"][0]["delta"].contains("content"))
      texts[idx] += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  ASSERT_EQ(texts.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(texts[i], FakeBackend::expected_text(3, i, 4));
}

TEST(OpenAIChat, LogprobsInChatFormat) {
  TestServer s;
  Json b = chat_body(3);
  b["logprobs"] = true;
  b["top_logprobs"] = 2;
  Json j = parse(s.post("/v1/chat/completions", b).body);
  const Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  std::string text = FakeBackend::expected_text(3, 0, 3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(content[k]["token"], std::string(1, text[k]));
    EXPECT_FLOAT_EQ(content[k]["logprob"].get<float>(), -static_cast<float>(k % 5 + 1) / 4);
    EXPECT_EQ(content[k]["bytes"], Json::array({static_cast<int>(text[k])}));
    ASSERT_EQ(content[k]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[k]["top_logprobs"][0]["token"], std::string(1, text[k]));
    EXPECT_EQ(content[k]["top_logprobs"][1]["token"],
              std::string(1, static_cast<char>(text[k] + 1)));
  }
  auto p = s.backend->last_params();
  EXPECT_TRUE(p.return_logprobs);
  EXPECT_EQ(p.top_logprobs, 2);
}

TEST(OpenAIChat, StopStringEndsTheChoice) {
  TestServer s;
  Json b = chat_body(20);
  b["stop"] = Json::array({"f"});
  Json j = parse(s.post("/v1/chat/completions", b).body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "de");  // seed 3: d e [f]
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

struct BadCase {
  const char* name;
  Json patch;  // merged into a valid body
  int status;
  const char* param;
};

TEST(OpenAIChat, PassesStructuredOutputConstraints) {
  using Kind = grammar::GrammarSpec::Kind;
  TestServer s;
  Json b = chat_body(4);
  b["response_format"] = {{"type", "json_object"}};
  ASSERT_EQ(s.post("/v1/chat/completions", b).status, 200);
  ASSERT_TRUE(s.backend->last_params().constraint);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kJsonObject);
  b = chat_body(4);
  b["response_format"] = {{"type", "text"}};
  ASSERT_EQ(s.post("/v1/chat/completions", b).status, 200);
  EXPECT_FALSE(s.backend->last_params().constraint);
  b = chat_body(4);
  b["guided_choice"] = {"yes", "no"};
  b["guided_decoding_backend"] = "xgrammar";
  ASSERT_EQ(s.post("/v1/chat/completions", b).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->choices, (std::vector<std::string>{"yes", "no"}));
  // A JSON Schema keeps the key order of the request body (properties in schema order).
  const std::string ordered_body =
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,)"
      R"("response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,)"
      R"("schema":{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}}}}})";
  ASSERT_EQ(s.post("/v1/chat/completions", ordered_body).status, 200);
  ASSERT_TRUE(s.backend->last_params().constraint);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kJsonSchema);
  EXPECT_TRUE(s.backend->last_params().constraint->strict);
  EXPECT_EQ(s.backend->last_params().constraint->text,
            R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}})");
  b = chat_body(4);
  b["guided_json"] = R"({"type": "integer"})";
  ASSERT_EQ(s.post("/v1/chat/completions", b).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kJsonSchema);
  EXPECT_EQ(s.backend->last_params().constraint->text, R"({"type": "integer"})");
  EXPECT_FALSE(s.backend->last_params().constraint->strict);
  Json c = {{"prompt", "x"}, {"max_tokens", 2}, {"guided_regex", "[0-9]+"}};
  ASSERT_EQ(s.post("/v1/completions", c).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kRegex);
  EXPECT_EQ(s.backend->last_params().constraint->text, "[0-9]+");
  c = {{"prompt", "x"}, {"max_tokens", 2}, {"guided_grammar", "root ::= \"a\""}};
  ASSERT_EQ(s.post("/v1/completions", c).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kGrammar);
  c = {{"prompt", "x"}, {"max_tokens", 2}, {"guided_json", {{"type", "array"}}}};
  ASSERT_EQ(s.post("/v1/completions", c).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kJsonSchema);
  EXPECT_EQ(s.backend->last_params().constraint->text, R"({"type":"array"})");
}

TEST(OpenAIChat, RefusesBadRequestsNamingTheField) {
  TestServer s;
  std::vector<BadCase> cases = {
      {"wrong type", {{"temperature", "hot"}}, 400, "temperature"},
      {"out of range", {{"temperature", 3}}, 400, "temperature"},
      {"bool is not a number", {{"top_p", true}}, 400, "top_p"},
      {"top_p 0 as a float", {{"top_p", 1e-320}}, 400, "top_p"},
      {"unknown field", {{"frobnicate", 1}}, 400, "frobnicate"},
      {"n too large", {{"n", 1000}}, 400, "n"},
      {"fractional int", {{"max_tokens", 2.5}}, 400, "max_tokens"},
      {"negative max_tokens", {{"max_tokens", -1}}, 400, "max_tokens"},
      {"too many stops",
       {{"stop", Json::array({"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n",
                              "o", "p", "q"})}},
       400,
       "stop"},
      {"top_logprobs without logprobs", {{"top_logprobs", 2}}, 400, "top_logprobs"},
      {"stream_options without stream",
       {{"stream_options", {{"include_usage", true}}}},
       400,
       "stream_options"},
      {"tool without a function",
       {{"tools", Json::array({{{"type", "function"}}})}},
       400,
       "tools[0].function"},
      {"json_schema without an object",
       {{"response_format", {{"type", "json_schema"}}}},
       400,
       "response_format.json_schema"},
      {"json_schema with a keyword it cannot enforce",
       {{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "x"}, {"schema", {{"uniqueItems", true}}}}}}}},
       400,
       "response_format.json_schema.schema"},
      {"json_schema with an unknown field",
       {{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schemas", Json::object()}}}}}},
       400,
       "response_format.json_schema.schemas"},
      {"unknown response_format",
       {{"response_format", {{"type", "yaml"}}}},
       400,
       "response_format"},
      {"two constraints",
       {{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a+"}},
       400,
       "guided_regex"},
      {"empty guided_choice", {{"guided_choice", Json::array()}}, 400, "guided_choice"},
      {"guided_json not a schema", {{"guided_json", 5}}, 400, "guided_json"},
      {"guided_json bad schema", {{"guided_json", "{\"type\": \"str\"}"}}, 400, "guided_json"},
      {"image url not a url",
       {{"messages",
         Json::array({{{"role", "user"},
                       {"content", Json::array({{{"type", "image_url"}, {"image_url", "x"}}})}}})}},
       400,
       "messages[0].content[0].image_url"},
      {"image detail",
       {{"messages", Json::array({{{"role", "user"},
                                   {"content", Json::array({{{"type", "image_url"},
                                                             {"image_url",
                                                              {{"url", "https://example.com/a.png"},
                                                               {"detail", "max"}}}}})}}})}},
       400,
       "messages[0].content[0].image_url.detail"},
      {"image on a text model",
       {{"messages",
         Json::array({{{"role", "user"},
                       {"content", Json::array({{{"type", "text"}, {"text", "what is this?"}},
                                                {{"type", "image_url"},
                                                 {"image_url",
                                                  {{"url", "https://example.com/a.png"}}}}})}}})}},
       400,
       "messages[0].content[1]"},
      {"audio content",
       {{"messages", Json::array({{{"role", "user"},
                                   {"content", Json::array({{{"type", "input_audio"},
                                                             {"input_audio", "x"}}})}}})}},
       400,
       "messages[0].content[0].type"},
      {"bad role",
       {{"messages", Json::array({{{"role", "robot"}, {"content", "x"}}})}},
       400,
       "messages[0].role"},
      {"unknown message field",
       {{"messages", Json::array({{{"role", "user"}, {"content", "x"}, {"mood", 1}}})}},
       400,
       "messages[0].mood"},
      {"empty messages", {{"messages", Json::array()}}, 400, "messages"},
      {"logit bias out of vocab", {{"logit_bias", {{"100000", 1}}}}, 400, "logit_bias"},
      {"logit bias not an id", {{"logit_bias", {{"abc", 1}}}}, 400, "logit_bias"},
      {"too long", {{"max_tokens", 100000}}, 400, "messages"},
      {"unknown model", {{"model", "gpt-9"}}, 404, ""},
  };
  for (const auto& c : cases) {
    Json b = chat_body(4);
    b.merge_patch(c.patch);
    auto r = s.post("/v1/chat/completions", b);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    Json j = parse(r.body);
    ASSERT_TRUE(j.contains("error")) << c.name;
    EXPECT_TRUE(j["error"]["message"].is_string()) << c.name;
    EXPECT_TRUE(j["error"]["type"].is_string()) << c.name;
    EXPECT_TRUE(j["error"].contains("code")) << c.name;
    if (*c.param) {
      EXPECT_EQ(j["error"]["param"], c.param) << c.name << ": " << r.body;
    }
  }
  EXPECT_EQ(s.backend->submitted.load(), 0);
}

TEST(OpenAIChat, ContextLengthErrorSaysWhy) {
  TestServer s;  // window 256
  Json b = chat_body(250);
  auto r = s.post("/v1/chat/completions", b);
  EXPECT_EQ(r.status, 400);
  Json j = parse(r.body);
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("256"), std::string::npos);
  // Without max_tokens the completion may use the rest of the window.
  b.erase("max_tokens");
  ASSERT_EQ(s.post("/v1/chat/completions", b).status, 200);
  EXPECT_EQ(s.backend->last_params().max_new_tokens, 256 - 19);
}

TEST(OpenAIChat, MalformedBodies) {
  TestServer s;
  for (const std::string body : {"{not json", "[1,2]", "\"text\"", "", "{\"messages\": [}"}) {
    auto r = s.post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(parse(r.body)["error"]["type"], "invalid_request_error") << body;
  }
  std::string deep(1000, '[');
  EXPECT_EQ(s.post("/v1/chat/completions", "{\"a\":" + deep).status, 400);
}

TEST(OpenAIChat, ErrorAfterStreamingBeganIsAnEventThenDone) {
  TestServer s;
  s.backend->fail_after_tokens = 2;
  Json b = chat_body(10);
  b["stream"] = true;
  auto r = s.post("/v1/chat/completions", b);
  ASSERT_EQ(r.status, 200);
  auto events = sse_payloads(r.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json err = parse(events[events.size() - 2]);
  ASSERT_TRUE(err.contains("error")) << r.body;
  EXPECT_EQ(err["error"]["message"], "injected failure");
  // The same failure before anything was sent is a plain error response.
  b["stream"] = false;
  auto r2 = s.post("/v1/chat/completions", b);
  EXPECT_EQ(r2.status, 500);
  EXPECT_EQ(parse(r2.body)["error"]["type"], "server_error");
}

TEST(OpenAIChat, TimeoutIsReported) {
  TestServer s;
  s.backend->step_delay_ms = 20;
  Json b = chat_body(200);
  b["max_tokens"] = 100;
  b["timeout_ms"] = 50;
  auto r = s.post("/v1/chat/completions", b);
  EXPECT_EQ(r.status, 408) << r.body;
  EXPECT_EQ(parse(r.body)["error"]["type"], "timeout_error");
}

TEST(OpenAICompletions, TextPromptsTokenPromptsEchoAndIndexes) {
  TestServer s;
  Json b = {{"model", "fake-model"}, {"prompt", Json::array({"ab", "cd"})},
            {"max_tokens", 3},       {"n", 2},
            {"echo", true},          {"seed", 1}};
  auto r = s.post("/v1/completions", b);
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 2; ++i) {
      const Json& c = j["choices"][p * 2 + i];
      EXPECT_EQ(c["index"], p * 2 + i);
      EXPECT_EQ(c["text"], std::string(p == 0 ? "ab" : "cd") + FakeBackend::expected_text(1, i, 3));
    }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 6);  // BOS + 2 bytes, per prompt
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);

  Json ids = {{"prompt", Json::array({1, 100, 101})}, {"max_tokens", 2}};
  auto r2 = s.post("/v1/completions", ids);
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(s.backend->last_prompt(), (std::vector<int32_t>{1, 100, 101}));
  Json bad = {{"prompt", Json::array({1, 999999})}};
  EXPECT_EQ(s.post("/v1/completions", bad).status, 400);
}

TEST(OpenAICompletions, LogprobsInCompletionsFormat) {
  TestServer s;
  Json b = {{"prompt", "x"}, {"max_tokens", 4}, {"logprobs", 2}, {"seed", 0}};
  Json j = parse(s.post("/v1/completions", b).body);
  const Json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  EXPECT_EQ(lp["tokens"], Json::array({"a", "b", "c", "d"}));
  EXPECT_EQ(lp["text_offset"], Json::array({0, 1, 2, 3}));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.5f);
  ASSERT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_TRUE(lp["top_logprobs"][0].contains("a"));
  EXPECT_TRUE(lp["top_logprobs"][0].contains("b"));
}

TEST(OpenAICompletions, StreamsTextChunks) {
  TestServer s;
  Json b = {{"prompt", "x"},
            {"max_tokens", 5},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  auto events = sse_payloads(s.post("/v1/completions", b).body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i)
    text += parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "abcde");
  EXPECT_EQ(parse(events[events.size() - 2])["usage"]["completion_tokens"], 5);
}

// The completions API holds its prompt in "prompt": its context errors name that field.
TEST(OpenAICompletions, ContextErrorsNameThePrompt) {
  TestServer s;  // window 256
  for (const Json& body :
       {Json{{"prompt", std::string(300, 'a')}}, Json{{"prompt", "x"}, {"max_tokens", 100000}}}) {
    auto r = s.post("/v1/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
    Json j = parse(r.body);
    EXPECT_EQ(j["error"]["code"], "context_length_exceeded") << r.body;
    EXPECT_EQ(j["error"]["param"], "prompt") << r.body;
  }
  Json j = parse(s.post("/v1/completions", Json{{"prompt", "x"}, {"top_p", 1e-320}}).body);
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("1e-320"), std::string::npos);
}

TEST(OpenAICompletions, RefusesUnsupportedOptions) {
  TestServer s;
  EXPECT_EQ(s.post("/v1/completions", Json{{"prompt", "x"}, {"suffix", "y"}}).status, 400);
  EXPECT_EQ(s.post("/v1/completions", Json{{"prompt", "x"}, {"best_of", 3}}).status, 400);
  EXPECT_EQ(
      s.post("/v1/completions", Json{{"prompt", "x"}, {"echo", true}, {"logprobs", 1}}).status,
      400);
  EXPECT_EQ(s.post("/v1/completions", Json{{"prompt", Json::array()}}).status, 400);
  EXPECT_EQ(s.post("/v1/completions", Json{{"prompt", 5}}).status, 400);
  EXPECT_EQ(s.post("/v1/completions", Json{{"max_tokens", 5}}).status, 400);
}

}  // namespace
}  // namespace tachyon::server::testing
