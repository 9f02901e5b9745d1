#include "engine/generate_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"

namespace tachyon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

GenerateConfig parse(const char* text) {
  return GenerateConfig::from_json(Json::parse(text));
}

// The error message for a config that must be refused.
std::string refusal(const char* text) {
  try {
    parse(text);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

TEST(GenerateConfig, Defaults) {
  const GenerateConfig c = parse("{}");
  EXPECT_FALSE(c.max_new_tokens.has_value());
  EXPECT_EQ(c.temperature, 1.0f);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_EQ(c.top_p, 1.0f);
  EXPECT_EQ(c.num_return_sequences, 1);
  EXPECT_EQ(c.num_beams, 1);
  EXPECT_FALSE(c.is_greedy());
  EXPECT_EQ(c.width(), 1);
}

TEST(GenerateConfig, ParsesEveryField) {
  const GenerateConfig c = parse(R"({
    "max_new_tokens": 20, "min_new_tokens": 2, "temperature": 0.7, "top_k": 40,
    "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5,
    "frequency_penalty": -0.5, "no_repeat_ngram_size": 3, "random_seed": 18446744073709551615,
    "stop_words_str": ["\n\n", "END"], "stop_words_list": [[13, 13], [2]],
    "num_return_sequences": 2, "num_beams": 4, "length_penalty": 0.8, "ignore_eos": true,
    "timeout_ms": 1500, "return_logprobs": true, "top_logprobs": 5,
    "logit_bias": {"7": -100, "3": 2.5}, "bad_words_list": [[1, 2], [9]]})");
  EXPECT_EQ(*c.max_new_tokens, 20);
  EXPECT_EQ(c.min_new_tokens, 2);
  EXPECT_FLOAT_EQ(c.temperature, 0.7f);
  EXPECT_EQ(c.top_k, 40);
  EXPECT_FLOAT_EQ(c.top_p, 0.9f);
  EXPECT_FLOAT_EQ(c.min_p, 0.05f);
  EXPECT_FLOAT_EQ(c.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(c.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(c.frequency_penalty, -0.5f);
  EXPECT_EQ(c.no_repeat_ngram_size, 3);
  EXPECT_EQ(*c.random_seed, 18446744073709551615ull);
  EXPECT_THAT(c.stop_words_str, ElementsAre("\n\n", "END"));
  EXPECT_THAT(c.stop_words_list, ElementsAre(ElementsAre(13, 13), ElementsAre(2)));
  EXPECT_EQ(c.num_return_sequences, 2);
  EXPECT_EQ(c.num_beams, 4);
  EXPECT_EQ(c.width(), 4);
  EXPECT_FLOAT_EQ(c.length_penalty, 0.8f);
  EXPECT_TRUE(c.ignore_eos);
  EXPECT_EQ(c.timeout_ms, 1500);
  EXPECT_TRUE(c.return_logprobs);
  EXPECT_EQ(c.top_logprobs, 5);
  EXPECT_THAT(c.logit_bias, ElementsAre(Pair(3, 2.5f), Pair(7, -100.0f)));
  EXPECT_THAT(c.bad_words_list, ElementsAre(ElementsAre(1, 2), ElementsAre(9)));
  // Round trip.
  const GenerateConfig d = GenerateConfig::from_json(c.to_json());
  EXPECT_EQ(d.to_json(), c.to_json());
}

TEST(GenerateConfig, AcceptedShapesAndBoundaries) {
  EXPECT_EQ(*parse(R"({"max_new_tokens": 10.0})").max_new_tokens, 10);
  EXPECT_EQ(*parse(R"({"max_new_tokens": 1})").max_new_tokens, 1);
  EXPECT_TRUE(parse(R"({"temperature": 0})").is_greedy());
  EXPECT_EQ(parse(R"({"top_p": 1})").top_p, 1.0f);
  EXPECT_EQ(parse(R"({"min_p": 1})").min_p, 1.0f);
  EXPECT_EQ(parse(R"({"min_p": 0})").min_p, 0.0f);
  EXPECT_EQ(parse(R"({"top_k": 0})").top_k, 0);
  EXPECT_EQ(parse(R"({"random_seed": null})").random_seed, std::nullopt);
  EXPECT_THAT(parse(R"({"stop_words_str": "###"})").stop_words_str, ElementsAre("###"));
  EXPECT_THAT(parse(R"({"stop_words_list": [5, 6]})").stop_words_list,
              ElementsAre(ElementsAre(5), ElementsAre(6)));
  EXPECT_THAT(parse(R"({"logit_bias": [[4, 1.5]]})").logit_bias, ElementsAre(Pair(4, 1.5f)));
  EXPECT_EQ(parse(R"({"num_beams": 4, "num_return_sequences": 4})").num_return_sequences, 4);
  EXPECT_EQ(parse(R"({"top_logprobs": 20, "return_logprobs": true})").top_logprobs, 20);
  EXPECT_EQ(parse(R"({"min_new_tokens": 5, "max_new_tokens": 5})").min_new_tokens, 5);
}

TEST(GenerateConfig, RefusesBadValuesNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"top_p": 0})", "top_p"},
      {R"({"top_p": 1.0001})", "top_p"},
      {R"({"top_p": -0.5})", "top_p"},
      {R"({"temperature": -0.1})", "temperature"},
      {R"({"num_return_sequences": 0})", "num_return_sequences"},
      {R"({"num_return_sequences": 65})", "num_return_sequences"},
      {R"({"num_beams": 0})", "num_beams"},
      {R"({"num_beams": 2, "num_return_sequences": 3})", "num_return_sequences"},
      {R"({"max_new_tokens": 0})", "max_new_tokens"},
      {R"({"max_new_tokens": -3})", "max_new_tokens"},
      {R"({"max_new_tokens": 2.5})", "max_new_tokens"},
      {R"({"max_new_tokens": "10"})", "max_new_tokens"},
      {R"({"max_new_tokens": 1e20})", "max_new_tokens"},
      {R"({"min_new_tokens": -1})", "min_new_tokens"},
      {R"({"min_new_tokens": 6, "max_new_tokens": 5})", "min_new_tokens"},
      {R"({"top_k": -1})", "top_k"},
      {R"({"min_p": 1.5})", "min_p"},
      {R"({"min_p": -0.1})", "min_p"},
      {R"({"repetition_penalty": 0})", "repetition_penalty"},
      {R"({"repetition_penalty": -1})", "repetition_penalty"},
      {R"({"no_repeat_ngram_size": -2})", "no_repeat_ngram_size"},
      {R"({"random_seed": -1})", "random_seed"},
      {R"({"random_seed": "abc"})", "random_seed"},
      {R"({"stop_words_str": [""]})", "stop_words_str"},
      {R"({"stop_words_str": [1]})", "stop_words_str"},
      {R"({"stop_words_list": [[]]})", "stop_words_list"},
      {R"({"stop_words_list": [["a"]]})", "stop_words_list"},
      {R"({"stop_words_list": [[-4]]})", "stop_words_list"},
      {R"({"bad_words_list": {"a": 1}})", "bad_words_list"},
      {R"({"ignore_eos": 1})", "ignore_eos"},
      {R"({"return_logprobs": "yes"})", "return_logprobs"},
      {R"({"top_logprobs": 21, "return_logprobs": true})", "top_logprobs"},
      {R"({"top_logprobs": 2})", "top_logprobs"},
      {R"({"timeout_ms": -5})", "timeout_ms"},
      {R"({"logit_bias": {"x": 1}})", "logit_bias"},
      {R"({"logit_bias": {"-3": 1}})", "logit_bias"},
      {R"({"logit_bias": {"3": "big"}})", "logit_bias"},
      {R"({"logit_bias": [[3, 1], [3, 2]]})", "logit_bias"},
      {R"({"length_penalty": "long"})", "length_penalty"},
      {R"({"temperature": true})", "temperature"},
      {R"({"frobnicate": 1})", "frobnicate"},
  };
  for (const auto& [text, field] : cases) EXPECT_THAT(refusal(text), HasSubstr(field)) << text;
  EXPECT_THAT(refusal("[1, 2]"), HasSubstr("expected an object"));
}

TEST(GenerateConfig, ModelLimits) {
  auto check = [](const char* text, int32_t prompt_len) {
    parse(text).validate_for_model(/*vocab=*/100, /*max_seq_len=*/64, prompt_len);
  };
  EXPECT_NO_THROW(check(R"({"max_new_tokens": 54})", 10));
  try {
    check(R"({"max_new_tokens": 55})", 10);
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("max_new_tokens"));
    EXPECT_THAT(e.what(), HasSubstr("64"));
  }
  EXPECT_THROW(check(R"({"max_new_tokens": 1000})", 1), InvalidArgument);
  EXPECT_THROW(check("{}", 64), InvalidArgument);  // no room left at all
  EXPECT_NO_THROW(check("{}", 63));
  EXPECT_THROW(check(R"({"stop_words_list": [[100]]})", 3), InvalidArgument);
  EXPECT_NO_THROW(check(R"({"stop_words_list": [[99]]})", 3));
  EXPECT_THROW(check(R"({"bad_words_list": [[5, 100]]})", 3), InvalidArgument);
  EXPECT_THROW(check(R"({"logit_bias": {"100": 1}})", 3), InvalidArgument);
  EXPECT_THROW(check(R"({"top_k": 101})", 3), InvalidArgument);
  EXPECT_NO_THROW(check(R"({"top_k": 100})", 3));
  EXPECT_THROW(check(R"({"min_new_tokens": 62})", 3), InvalidArgument);
}

}  // namespace
}  // namespace tachyon

namespace tachyon {
namespace {

TEST(GenerateConfig, StructuredOutputFields) {
  using Kind = grammar::GrammarSpec::Kind;
  auto c = GenerateConfig::from_json(Json::parse(R"({"regex": "a+b"})"));
  ASSERT_TRUE(c.constraint);
  EXPECT_EQ(c.constraint->kind, Kind::kRegex);
  EXPECT_EQ(c.constraint->text, "a+b");
  c = GenerateConfig::from_json(Json::parse(R"({"ebnf": "root ::= \"x\""})"));
  EXPECT_EQ(c.constraint->kind, Kind::kGrammar);
  c = GenerateConfig::from_json(Json::parse(R"({"choice": ["a", "b"]})"));
  EXPECT_EQ(c.constraint->choices, (std::vector<std::string>{"a", "b"}));
  c = GenerateConfig::from_json(Json::parse(R"({"response_format": {"type": "json_object"}})"));
  EXPECT_EQ(c.constraint->kind, Kind::kJsonObject);
  EXPECT_EQ(GenerateConfig::from_json(c.to_json()).constraint, c.constraint);
  EXPECT_FALSE(GenerateConfig::from_json(Json::parse(R"({"response_format": {"type": "text"}})"))
                   .constraint);
  c = GenerateConfig::from_json(Json::parse(R"({"json_schema": "{\"type\": \"integer\"}"})"));
  EXPECT_EQ(c.constraint->kind, Kind::kJsonSchema);
  EXPECT_EQ(c.constraint->text, R"({"type": "integer"})");
  EXPECT_EQ(GenerateConfig::from_json(c.to_json()).constraint, c.constraint);
  c = GenerateConfig::from_json(Json::parse(
      R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
          "schema": {"type": "array"}}}})"));
  EXPECT_EQ(c.constraint->kind, Kind::kJsonSchema);
  EXPECT_TRUE(c.constraint->strict);
  EXPECT_EQ(c.constraint->text, R"({"type":"array"})");
  EXPECT_EQ(GenerateConfig::from_json(c.to_json()).constraint, c.constraint);

  auto refused = [](const char* json, const std::string& what) {
    try {
      GenerateConfig::from_json(Json::parse(json));
      ADD_FAILURE() << "accepted " << json;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(R"({"regex": "a", "ebnf": "root ::= \"a\""})", "only one of regex, ebnf");
  refused(R"({"regex": 3})", "generate_config.regex");
  refused(R"({"choice": []})", "generate_config.choice: the list is empty");
  refused(R"({"response_format": {"type": "json_schema"}})",
          "response_format.json_schema: an object is required");
  refused(R"({"response_format": {"type": "json_schema", "json_schema": {"schemas": {}}}})",
          "unknown field 'schemas'");
  refused(R"({"response_format": {"type": "yaml"}})",
          "'yaml' is not one of text, json_object, json_schema");
  refused(R"({"json_schema": {}, "regex": "a"})", "only one of regex, ebnf, choice, json_schema");
  refused(R"({"response_format": {"type": "json_object", "strict": true}})",
          "unknown field 'strict'");
  // Not compiled for a vocabulary: the engine cannot run it.
  c = GenerateConfig::from_json(Json::parse(R"({"regex": "a"})"));
  EXPECT_THROW(c.validate_for_model(100, 64, 4), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
