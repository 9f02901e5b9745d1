// Tool call parsing per format: several calls, text around them, malformed calls left as
// text, and streaming in every split giving what the whole output gives, with no markup
// of a call passed on as text.
#include "frontend/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

namespace tachyon {
namespace {

std::string names(const std::vector<ToolCall>& calls) {
  std::string s;
  for (const ToolCall& c : calls) s += c.name + "(" + c.arguments + ")";
  return s;
}

TEST(ToolCalls, HermesCallsAndText) {
  auto r =
      parse_tool_calls(ToolCallFormat::kHermes,
                       "Let me look.\n<tool_call>\n{\"name\": \"get\", \"arguments\": "
                       "{\"city\": \"Paris\", \"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": "
                       "\"now\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(r.content, "Let me look.");
  EXPECT_EQ(names(r.calls), "get({\"city\":\"Paris\",\"a\":1})now({})");
  // Arguments given as a JSON string, and a call cut at the end of the output.
  r = parse_tool_calls(ToolCallFormat::kHermes,
                       "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 2}\"}");
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(names(r.calls), "f({\"x\":2})");
}

TEST(ToolCalls, MalformedCallsStayText) {
  const std::string bad[] = {
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": }</tool_call>",
      "<tool_call>{\"arguments\": {}}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
      "<tool_call>{\"name\": \"f\"",
  };
  for (const std::string& b : bad) {
    auto r = parse_tool_calls(ToolCallFormat::kHermes, "x " + b);
    EXPECT_TRUE(r.calls.empty()) << b;
    EXPECT_EQ(r.content, "x " + b);
  }
  auto r =
      parse_tool_calls(ToolCallFormat::kHermes,
                       "<tool_call>nope</tool_call> and <tool_call>{\"name\": \"g\"}</tool_call>");
  EXPECT_EQ(r.content, "<tool_call>nope</tool_call> and");
  EXPECT_EQ(names(r.calls), "g({})");
  r = parse_tool_calls(ToolCallFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"f\"}, 3]");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "[TOOL_CALLS] [{\"name\": \"f\"}, 3]");
  r = parse_tool_calls(ToolCallFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": {}}; oops");
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCalls, Llama3Json) {
  auto r = parse_tool_calls(ToolCallFormat::kLlama3Json,
                            "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; "
                            "{\"name\": \"b\", \"parameters\": {}}");
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(names(r.calls), "a({\"q\":\"x;y\"})b({})");
  r = parse_tool_calls(ToolCallFormat::kLlama3Json, "  {\"name\": \"a\", \"arguments\": {}}");
  EXPECT_EQ(names(r.calls), "a({})");
  r = parse_tool_calls(ToolCallFormat::kLlama3Json, "Plain answer {with braces}.");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "Plain answer {with braces}.");
}

TEST(ToolCalls, Mistral) {
  auto r = parse_tool_calls(ToolCallFormat::kMistral,
                            "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"k\": \"]\"}}, "
                            "{\"name\": \"b\", \"arguments\": {}}]");
  EXPECT_EQ(r.content, "Sure.");
  EXPECT_EQ(names(r.calls), "a({\"k\":\"]\"})b({})");
}

TEST(ToolCalls, StreamingInAnySplitMatchesTheWholeAndHidesMarkup) {
  struct Sample {
    ToolCallFormat f;
    std::string text;
  };
  const Sample samples[] = {
      {ToolCallFormat::kHermes,
       "Hi <tool<tool_call>{\"name\": \"a\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call> "
       "bye <tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call><tool_"},
      {ToolCallFormat::kMistral,
       "[TOOL [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": [1]}}]"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {}};{\"name\": \"b\"}"},
      {ToolCallFormat::kLlama3Json, "no calls here"},
  };
  std::mt19937 rng(3);
  for (const Sample& s : samples) {
    const ParsedToolCalls whole = parse_tool_calls(s.f, s.text);
    for (int run = 0; run < 50; ++run) {
      ToolCallStream stream(s.f);
      std::vector<ToolCallPiece> pieces;
      for (size_t i = 0; i < s.text.size();) {
        const size_t n = 1 + rng() % 7;
        for (auto& p : stream.feed(std::string_view(s.text).substr(i, n))) pieces.push_back(p);
        i += n;
      }
      for (auto& p : stream.finish()) pieces.push_back(p);
      std::string text;
      std::vector<ToolCall> calls;
      for (auto& p : pieces) {
        if (p.call) calls.push_back(*p.call);
        text += p.text;
      }
      EXPECT_EQ(names(calls), names(whole.calls)) << s.text;
      if (!whole.calls.empty()) {
        EXPECT_EQ(text.find("<tool_call>{"), std::string::npos) << text;
        EXPECT_EQ(text.find("[TOOL_CALLS]["), std::string::npos) << text;
      }
    }
  }
  auto r = parse_tool_calls(ToolCallFormat::kHermes, samples[0].text);
  EXPECT_EQ(r.content, "Hi <tool bye <tool_");
  EXPECT_EQ(names(r.calls), "a({\"s\":\"</tool_call>\"})b({})");
}

TEST(ToolCalls, RequiredFormAndNamesAndDetection) {
  auto c = parse_required_tool_calls(
      R"([{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}])");
  ASSERT_TRUE(c);
  EXPECT_EQ(names(*c), "a({\"x\":1})b({})");
  EXPECT_FALSE(parse_required_tool_calls(R"([{"name": "a", "arguments": {"x": 1})"));
  EXPECT_FALSE(parse_required_tool_calls(R"([])"));
  EXPECT_EQ(tool_call_format_from_name("mistral"), ToolCallFormat::kMistral);
  EXPECT_FALSE(tool_call_format_from_name("pythonic"));
  EXPECT_EQ(detect_tool_call_format("{% for t in tools %}<tool_call>{{ t }}</tool_call>"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("[TOOL_CALLS] {{ calls }}"), ToolCallFormat::kMistral);
  EXPECT_FALSE(detect_tool_call_format("{{ messages }}"));
  EXPECT_FALSE(detect_tool_call_format("<tool_call> [TOOL_CALLS]"));
  const std::string id = new_tool_call_id();
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(id.size(), 29u);
  EXPECT_NE(id, new_tool_call_id());
}

TEST(ToolCalls, DetectsTheFormatOfRealTemplates) {
  auto read = [](const std::string& name) {
    std::ifstream f(std::string(TACHYON_SOURCE_DIR) + "/tests/chat/templates/" + name);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_FALSE(ss.str().empty()) << name;
    return ss.str();
  };
  EXPECT_EQ(detect_tool_call_format(read("qwen2_tools.jinja")), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format(read("llama31_tools.jinja")), ToolCallFormat::kLlama3Json);
  for (const char* none : {"deepseek_r1.jinja", "gemma.jinja", "llama2_chat.jinja",
                           "mistral_instruct.jinja", "phi3.jinja"})
    EXPECT_FALSE(detect_tool_call_format(read(none))) << none;
}

}  // namespace
}  // namespace tachyon
