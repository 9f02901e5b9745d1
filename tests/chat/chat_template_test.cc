// ChatTemplate: the variables transformers passes, template selection and loading.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tachyon {
namespace {

TEST(ChatTemplate, StandardVariables) {
  auto t = ChatTemplate::compile(
      "{{ bos_token is defined }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
      "{{ add_generation_prompt }}|{{ messages | length }}|{{ enable_thinking }}|{{ unk_token is "
      "defined }}");
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  in.eos_token = "</s>";
  in.add_generation_prompt = true;
  in.extra = {{"enable_thinking", false}};
  // Unset special tokens are left out (transformers passes special_tokens_map only).
  EXPECT_EQ(t.render(in), "False|</s>|True|True|True|1|False|False");
  in.extra = {{"messages", 1}};
  EXPECT_THROW(t.render(in), InvalidArgument);
}

// chat_template_kwargs come from requests: a kwarg replaces a special token, the others
// are new variables, and more keys or bytes than the limits are refused naming them.
TEST(ChatTemplate, KwargsAreBounded) {
  auto t = ChatTemplate::compile("{{ bos_token }}|{{ k0 }}|{{ k255 }}");
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  for (size_t i = 0; i < ChatTemplate::kMaxKwargs; ++i) in.extra["k" + std::to_string(i)] = i;
  in.extra["bos_token"] = "[B]";
  in.extra.erase("k1");  // still kMaxKwargs keys with bos_token
  EXPECT_EQ(t.render(in), "[B]|0|255");
  in.extra["k1"] = 1;
  auto expect_limit = [&](const std::string& fragment) {
    try {
      t.render(in);
      ADD_FAILURE() << "expected an error naming " << fragment;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_limit("the limit is 256");
  in.extra = Json::object();
  for (int i = 0; i < 100000; ++i) in.extra["x" + std::to_string(i)] = i;
  expect_limit("100000 keys; the limit is 256");
  in.extra = {{"big", std::string(ChatTemplate::kMaxKwargsBytes, 'a')}};
  expect_limit("bytes as JSON; the limit is 1048576");
}

TEST(ChatTemplate, OrderedInputsKeepKeyOrder) {
  auto t = ChatTemplate::compile("{% for tool in tools %}{{ tool | tojson }}{% endfor %}");
  const char* tools = R"([{"type": "function", "function": {"name": "f", "description": "d"}}])";
  OrderedChatTemplateInputs ordered;
  ordered.tools = nlohmann::ordered_json::parse(tools);
  EXPECT_EQ(t.render(ordered),
            R"({"type": "function", "function": {"name": "f", "description": "d"}})");
  ChatTemplateInputs sorted;  // nlohmann::json sorts keys
  sorted.tools = Json::parse(tools);
  EXPECT_EQ(t.render(sorted),
            R"({"function": {"description": "d", "name": "f"}, "type": "function"})");
}

TEST(ChatTemplate, SelectionFollowsTransformers) {
  Json cfg = Json::parse(R"({"chat_template": [{"name": "default", "template": "D"},
                                               {"name": "tool_use", "template": "T"}]})");
  ChatTemplateSet set = chat_templates_from_config(cfg);
  EXPECT_EQ(set.select(std::nullopt, false), "D");
  EXPECT_EQ(set.select(std::nullopt, true), "T");
  EXPECT_EQ(set.select("default", true), "D");
  EXPECT_THROW(set.select("rag", false), InvalidArgument);
  ChatTemplateSet none = chat_templates_from_config(Json::parse(R"({"bos_token": "<s>"})"));
  EXPECT_THROW(none.select(std::nullopt, false), InvalidArgument);
  ChatTemplateSet only_tools = chat_templates_from_config(
      Json::parse(R"({"chat_template": [{"name": "tool_use", "template": "T"}]})"));
  EXPECT_THROW(only_tools.select(std::nullopt, false), InvalidArgument);
  EXPECT_THROW(chat_templates_from_config(Json::parse(R"({"chat_template": 5})")), InvalidArgument);
}

TEST(ChatTemplate, SpecialTokensAsStringsOrAddedTokens) {
  Json cfg =
      Json::parse(R"({"bos_token": {"__type": "AddedToken", "content": "<B>"}, "eos_token": "<E>",
                             "pad_token": null})");
  EXPECT_EQ(special_token(cfg, "bos_token"), "<B>");
  EXPECT_EQ(special_token(cfg, "eos_token"), "<E>");
  EXPECT_EQ(special_token(cfg, "pad_token"), "");
  EXPECT_EQ(special_token(cfg, "unk_token"), "");
}

TEST(ChatTemplate, SidecarJinjaFileTakesPriority) {
  auto dir =
      std::filesystem::temp_directory_path() / ("tachyon_chat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "additional_chat_templates");
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "from config"})";
  EXPECT_EQ(load_chat_templates(dir.string()).select(std::nullopt, false), "from config");
  // A processor's chat_template.json (llava-hf's folders) before tokenizer_config.json.
  std::ofstream(dir / "chat_template.json") << R"({"chat_template": "from processor"})";
  EXPECT_EQ(load_chat_templates(dir.string()).select(std::nullopt, false), "from processor");
  std::ofstream(dir / "chat_template.json") << R"({"chat_template": 3})";
  EXPECT_THROW(load_chat_templates(dir.string()), InvalidArgument);
  std::ofstream(dir / "chat_template.json") << R"({"chat_template": "from processor"})";
  std::ofstream(dir / "chat_template.jinja") << "from file\n";
  std::ofstream(dir / "additional_chat_templates" / "tool_use.jinja") << "tools";
  ChatTemplateSet set = load_chat_templates(dir.string());
  EXPECT_EQ(set.select(std::nullopt, false), "from file\n");
  EXPECT_EQ(set.select(std::nullopt, true), "tools");
  // The file's trailing newline is dropped when rendering, as jinja2 does.
  EXPECT_EQ(ChatTemplate::compile(set.select(std::nullopt, false)).render(ChatTemplateInputs{}),
            "from file");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, SyntaxErrorsAreInvalidArgument) {
  try {
    ChatTemplate::compile("{% for m in messages %}\n{{ m.content }");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("syntax error at line 2"), std::string::npos) << e.what();
  }
}

// A template read from a checkpoint names its file when it does not compile.
TEST(ChatTemplate, SyntaxErrorsNameTheFile) {
  auto dir =
      std::filesystem::temp_directory_path() / ("tachyon_chat_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto expect_named = [&](const std::string& fragment) {
    try {
      load_chat_templates(dir.string()).compile(std::nullopt, false);
      ADD_FAILURE() << "expected a syntax error naming " << fragment;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("syntax error at line 1"), std::string::npos);
    }
  };
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "{{ oops"})";
  expect_named((dir / "tokenizer_config.json").string() + ": chat_template");
  std::ofstream(dir / "chat_template.jinja") << "{% if %}";
  expect_named((dir / "chat_template.jinja").string());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon
