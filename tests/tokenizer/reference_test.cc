// Every text of tests/tokenizer/tokenizers_reference.json (produced with transformers'
// AutoTokenizer on the six reference tokenizers) must give exactly the reference ids,
// ids with special tokens, and decoded text. The bundled tiny-kjv-chat tokenizer must
// give the prompt ids of tests/engine/data/kjv_reference.json and decode its greedy
// generations to the reference texts.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/test_util.h"

namespace tachyon::testing {
namespace {

const Json& reference() {
  static const Json j = load_json_file(std::string(TACHYON_SOURCE_DIR) +
                                       "/tests/tokenizer/tokenizers_reference.json");
  return j;
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, EncodeDecodeMatchTransformers) {
  const std::string name = GetParam();
  auto tok = load_reference(name);
  ASSERT_NE(tok, nullptr);
  const Json& ref = reference()[name];
  ASSERT_TRUE(ref.contains("encode"));
  for (const Json& e : ref["encode"]) {
    const std::string text = e["text"].get<std::string>();
    SCOPED_TRACE(name + ": " + text);
    std::vector<int32_t> ids = tok->encode(text, false);
    EXPECT_EQ(ids, to_ids(e["ids"]));
    EXPECT_EQ(tok->encode(text, true), to_ids(e["ids_with_special"]));
    EXPECT_EQ(tok->decode(to_ids(e["ids"]), false), e["decoded"].get<std::string>());
  }
}

TEST_P(ReferenceTest, SpecialTokens) {
  const std::string name = GetParam();
  auto tok = load_reference(name);
  ASSERT_NE(tok, nullptr);
  const Json& ref = reference()[name];
  for (const char* key : {"bos_token", "eos_token"}) {
    const auto& actual = std::string(key) == "bos_token" ? tok->bos_token() : tok->eos_token();
    if (ref[key].is_null()) {
      EXPECT_FALSE(actual.has_value()) << key;
    } else {
      ASSERT_TRUE(actual.has_value()) << key;
      EXPECT_EQ(*actual, ref[key].get<std::string>());
      auto id = std::string(key) == "bos_token" ? tok->bos_id() : tok->eos_id();
      ASSERT_TRUE(id.has_value());
      EXPECT_EQ(tok->id_to_token(*id), *actual);
      EXPECT_TRUE(tok->is_special(*id));
    }
  }
}

TEST_P(ReferenceTest, ChatTemplatesRenderAsTransformers) {
  const std::string name = GetParam();
  auto tok = load_reference(name);
  ASSERT_NE(tok, nullptr);
  const Json& ref = reference()[name];
  ASSERT_FALSE(ref["chat"].empty());
  for (const Json& c : ref["chat"]) {
    ChatRequest req;
    req.messages = c["messages"];
    req.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    SCOPED_TRACE(name + ": " + c.dump());
    if (c.contains("error")) {
      // transformers: "Cannot use chat template functions because tokenizer.chat_template is not
      // set"
      EXPECT_THROW(tok->apply_chat_template(req), InvalidArgument);
      continue;
    }
    ChatEncoding enc = tok->apply_chat_template(req);
    EXPECT_EQ(enc.rendered, c["rendered"].get<std::string>());
    EXPECT_EQ(enc.ids, tok->encode(c["rendered"].get<std::string>(), false));
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTest, ::testing::ValuesIn(reference_names()),
                         [](const auto& info) { return info.param; });

TEST(KjvReference, PromptsAndGreedyTexts) {
  auto tok = Tokenizer::load(kjv_dir());
  const Json ref =
      load_json_file(std::string(TACHYON_SOURCE_DIR) + "/tests/engine/data/kjv_reference.json");
  int checked = 0;
  for (const auto& [model, items] : ref["models"].items()) {
    for (const Json& e : items) {
      const std::string prompt = e["prompt"].get<std::string>();
      SCOPED_TRACE(prompt);
      if (e["kind"] == "text") {
        EXPECT_EQ(tok->encode(prompt, true), to_ids(e["prompt_ids"]));
      } else {
        ChatRequest req;
        req.messages = Json::array({{{"role", "user"}, {"content", prompt}}});
        req.add_generation_prompt = true;
        EXPECT_EQ(tok->apply_chat_template(req).ids, to_ids(e["prompt_ids"]));
      }
      ++checked;
      const Json& greedy = e["greedy"];
      EXPECT_EQ(tok->decode(to_ids(greedy[0]), true), greedy[1].get<std::string>());
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace tachyon::testing
