// RTP-LLM's native API (POST /) end to end over HTTP, against the fake backend.
#include <gtest/gtest.h>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

const std::string kNativeSep = "\r\n\r\n";

TEST(NativeApi, PassesStructuredOutputConstraints) {
  using Kind = grammar::GrammarSpec::Kind;
  TestServer s;
  Json b = {{"prompt", "x"}, {"generate_config", {{"max_new_tokens", 2}, {"regex", "a|b"}}}};
  ASSERT_EQ(s.post("/", b).status, 200);
  ASSERT_TRUE(s.backend->last_params().constraint);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kRegex);
  b = {{"prompt", "x"}, {"generate_config", {{"max_new_tokens", 2}, {"ebnf", "root ::= \"a\""}}}};
  ASSERT_EQ(s.post("/", b).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kGrammar);
  b = {
      {"prompt", "x"},
      {"generate_config", {{"max_new_tokens", 2}, {"response_format", {{"type", "json_object"}}}}}};
  ASSERT_EQ(s.post("/", b).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kJsonObject);
  b = {{"prompt", "x"},
       {"generate_config", {{"max_new_tokens", 2}, {"json_schema", {{"type", "boolean"}}}}}};
  ASSERT_EQ(s.post("/", b).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->kind, Kind::kJsonSchema);
  EXPECT_EQ(s.backend->last_params().constraint->text, R"({"type":"boolean"})");
  const std::string ordered =
      R"({"prompt":"x","generate_config":{"max_new_tokens":2,"response_format":{"type":)"
      R"("json_schema","json_schema":{"schema":{"properties":{"b":{},"a":{}}}}}}})";
  ASSERT_EQ(s.post("/", ordered).status, 200);
  EXPECT_EQ(s.backend->last_params().constraint->text, R"({"properties":{"b":{},"a":{}}})");
  for (const Json& bad :
       {Json{{"regex", "a"}, {"ebnf", "root ::= \"a\""}},
        Json{{"json_schema", {{"not", Json::object()}}}}, Json{{"json_schema", "{"}},
        Json{{"response_format", {{"type", "json_schema"}}}}, Json{{"choice", Json::array()}},
        Json{{"regex", 5}}}) {
    auto r = s.post("/", {{"prompt", "x"}, {"generate_config", bad}});
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
  }
}

TEST(NativeApi, SinglePromptResponseAndAuxInfo) {
  TestServer s;
  Json b = {{"prompt", "hello"}, {"generate_config", {{"max_new_tokens", 4}, {"random_seed", 2}}}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = parse(r.body);
  EXPECT_EQ(j["response"], FakeBackend::expected_text(2, 0, 4));
  EXPECT_EQ(j["finished"], true);
  const Json& aux = j["aux_info"];
  EXPECT_EQ(aux["input_len"], 6);  // BOS + 5 bytes
  EXPECT_EQ(aux["output_len"], 4);
  EXPECT_EQ(aux["iter_count"], 4);
  for (const char* k : {"cost_time", "first_token_cost_time", "prefix_len", "reuse_len",
                        "cum_log_probs", "wait_time"})
    EXPECT_TRUE(aux.contains(k)) << k;
  EXPECT_EQ(s.backend->last_prompt().front(), 1);  // text prompts get BOS
}

TEST(NativeApi, AliasesAndTopLevelFields) {
  TestServer s;
  // generation_config alias; top-level fields win over the config's.
  Json b = {{"text", "x"},
            {"generation_config", {{"max_new_tokens", 9}, {"top_k", 3}}},
            {"max_new_tokens", 2},
            {"temperature", 0.25}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse(r.body)["response"], "ab");
  auto p = s.backend->last_params();
  EXPECT_EQ(p.top_k, 3);
  EXPECT_FLOAT_EQ(p.temperature, 0.25f);
  Json greedy = {{"prompt", "x"},
                 {"generate_config", {{"max_new_tokens", 1}, {"do_sample", false}}}};
  ASSERT_EQ(s.post("/", greedy).status, 200);
  EXPECT_FLOAT_EQ(s.backend->last_params().temperature, 0.0f);
}

TEST(NativeApi, StreamsFullTextThenDone) {
  TestServer s;
  Json b = {{"prompt", "x"},
            {"generate_config", {{"max_new_tokens", 4}, {"yield_generator", true}}}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  auto events = sse_payloads(r.body, kNativeSep, "data:");
  ASSERT_EQ(events.back(), "[done]");
  std::string last;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json e = parse(events[i]);
    std::string text = e["response"];
    EXPECT_EQ(text.rfind(last, 0), 0u) << "not cumulative: " << text << " after " << last;
    last = text;
    EXPECT_EQ(e["finished"], i + 2 == events.size());
  }
  EXPECT_EQ(last, "abcd");
}

TEST(NativeApi, IncrementalStreamingSendsOnlyNewText) {
  TestServer s;
  Json b = {{"prompt", "x"},
            {"yield_generator", true},
            {"generate_config", {{"max_new_tokens", 5}, {"return_incremental", true}}}};
  auto events = sse_payloads(s.post("/", b).body, kNativeSep, "data:");
  std::string all;
  for (size_t i = 0; i + 1 < events.size(); ++i)
    all += parse(events[i])["response"].get<std::string>();
  EXPECT_EQ(all, "abcde");
  // Incremental output without streaming is refused, as RTP-LLM does.
  Json bad = {{"prompt", "x"}, {"generate_config", {{"return_incremental", true}}}};
  auto r = s.post("/", bad);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(parse(r.body)["error_code"], 507);  // ERROR_INPUT_FORMAT_ERROR, as RTP-LLM
}

TEST(NativeApi, SeveralSequencesAreLists) {
  TestServer s;
  Json b = {{"prompt", "x"},
            {"generate_config",
             {{"max_new_tokens", 3}, {"num_return_sequences", 2}, {"return_output_ids", true}}}};
  Json j = parse(s.post("/", b).body);
  ASSERT_TRUE(j["response"].is_array());
  ASSERT_EQ(j["response"].size(), 2u);
  EXPECT_EQ(j["response"][0], "abc");
  EXPECT_EQ(j["response"][1], "bcd");
  ASSERT_EQ(j["aux_info"].size(), 2u);
  EXPECT_EQ(j["output_ids"][1], Json::array({'b' + 3, 'c' + 3, 'd' + 3}));
}

TEST(NativeApi, PromptBatchAndChatMessages) {
  TestServer s;
  Json b = {{"prompt_batch",
             Json::array({"x", "y", Json::array({{{"role", "user"}, {"content", "z"}}})})},
            {"generate_config", {{"max_new_tokens", 2}, {"return_input_ids", true}}}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = parse(r.body);
  ASSERT_EQ(j["response_batch"].size(), 3u);
  for (const auto& item : j["response_batch"]) {
    EXPECT_EQ(item["response"], "ab");
    EXPECT_EQ(item["finished"], true);
  }
  EXPECT_EQ(j["response_batch"][0]["input_ids"], Json::array({Json::array({1, 'x' + 3})}));
  // The chat prompt is rendered with the template (no extra BOS).
  std::string rendered = "user: z\nassistant:";
  EXPECT_EQ(j["response_batch"][2]["input_ids"][0].size(), rendered.size());

  Json m = {{"messages", Json::array({{{"role", "user"}, {"content", "q"}}})},
            {"max_new_tokens", 1}};
  EXPECT_EQ(s.post("/", m).status, 200);
  Json p = {{"prompt", Json::array({{{"role", "user"}, {"content", "q"}}})}, {"max_new_tokens", 1}};
  EXPECT_EQ(s.post("/", p).status, 200);
}

TEST(NativeApi, ErrorsUseRtpLlmCodes) {
  TestServer s;
  struct Case {
    Json body;
    int status;
    int code;
  };
  std::vector<Case> cases = {
      {Json{{"generate_config", {{"max_new_tokens", 1}}}}, 400, 509},               // no prompt
      {Json{{"prompt", ""}}, 400, 510},                                             // empty prompt
      {Json{{"prompt", "x"}, {"generate_config", {{"top_k", "many"}}}}, 400, 604},  // bad config
      {Json{{"prompt", "x"}, {"generate_config", {{"bogus", 1}}}}, 400, 604},
      {Json{{"prompt", "x"}, {"bogus", 1}}, 400, 507},
      // An adapter that is not loaded.
      {Json{{"prompt", "x"}, {"generate_config", {{"adapter_name", "lora1"}}}}, 400, 507},
      {Json{{"prompt", "x"}, {"generate_config", {{"return_logits", true}}}}, 400, 515},
      {Json{{"prompt", std::string(300, 'a')}}, 400, 511},
      {Json{{"prompt", Json::array({"a", "b"})}}, 400, 507},
  };
  for (const auto& c : cases) {
    auto r = s.post("/", c.body);
    EXPECT_EQ(r.status, c.status) << c.body.dump() << " -> " << r.body;
    Json j = parse(r.body);
    EXPECT_EQ(j["error_code"], c.code) << c.body.dump() << " -> " << r.body;
    EXPECT_TRUE(j["message"].is_string());
    EXPECT_EQ(j["error_code_str"].get<std::string>().rfind(std::to_string(c.code) + "_", 0), 0u);
  }
  auto r = s.post("/", std::string("{oops"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(parse(r.body)["error_code"], 507);
}

TEST(NativeApi, StreamErrorIsAnEvent) {
  TestServer s;
  s.backend->fail_after_tokens = 1;
  Json b = {{"prompt", "x"}, {"yield_generator", true}, {"max_new_tokens", 5}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200);
  auto events = sse_payloads(r.body, kNativeSep, "data:");
  ASSERT_GE(events.size(), 2u);
  Json err = parse(events.back());
  EXPECT_EQ(err["error_code"], 514);
  EXPECT_EQ(err["message"], "injected failure");
}

}  // namespace
}  // namespace tachyon::server::testing
