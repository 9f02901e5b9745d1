// The built-in JSON grammar against a list of texts and nlohmann's parser, and its masks
// against token-by-token acceptance over a vocabulary of JSON fragments.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backend/sampling.h"
#include "core/json.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace tachyon::grammar {
namespace {

std::shared_ptr<const TokenVocabulary> fragment_vocab() {
  std::vector<std::string> t{"{",
                             "}",
                             "[",
                             "]",
                             ":",
                             ",",
                             "\"",
                             " ",
                             "\n",
                             "  ",
                             "{\"",
                             "\":",
                             "\": ",
                             "\",",
                             "\"}",
                             "a",
                             "key",
                             "1",
                             "0",
                             "-",
                             ".",
                             "5e",
                             "+",
                             "true",
                             "tr",
                             "ue",
                             "null",
                             "false",
                             "\\",
                             "n",
                             "u",
                             "00e9",
                             "\xC3",
                             "\xA9",
                             "\xC3\xA9",
                             "\t",
                             "\x01",
                             "},",
                             "],",
                             "[]",
                             "{}",
                             "1.",
                             "e-3",
                             "e",
                             "r",
                             "l",
                             "s",
                             "f",
                             "t",
                             "E",
                             "9",
                             "b",
                             "<|endoftext|>",
                             ""};
  std::vector<bool> special(t.size(), false);
  special[t.size() - 2] = true;
  return std::make_shared<const TokenVocabulary>(t, special,
                                                 std::vector<int32_t>{int32_t(t.size()) - 1});
}

bool accepts(bool object_only, const std::string& text) {
  static auto vocab = fragment_vocab();
  static GrammarCache cache;
  GrammarMatcher m(cache.get(
      {object_only ? GrammarSpec::Kind::kJsonObject : GrammarSpec::Kind::kJson, "", {}}, vocab));
  return m.accept_bytes(text) && m.can_end();
}

TEST(JsonGrammar, AcceptsJsonAndRejectsTheRest) {
  const char* good[] = {"{}",
                        "{ }",
                        "{\"a\":1}",
                        "{\"a\": [1, -2.5e-3, true, null, \"x\\u00e9\\n\"]}",
                        "{\n  \"k\": {\"n\": {}},\n  \"l\": [[], [{}]]\n}",
                        "{\"\xC3\xA9\": 0.0}",
                        "{\"a\":\"\\\"\\\\\\/\\b\\f\\r\\t\"}",
                        "{\"a\" : 1E+10 }"};
  for (const char* g : good) {
    EXPECT_TRUE(accepts(true, g)) << g;
    EXPECT_TRUE(accepts(false, g)) << g;
    EXPECT_NO_THROW(Json::parse(g)) << g;
  }
  const char* values[] = {"[]", "1", "\"s\"", "true", "null", "[1,{\"a\":[]}]", "-0.5"};
  for (const char* v : values) {
    EXPECT_FALSE(accepts(true, v)) << v;
    EXPECT_TRUE(accepts(false, v)) << v;
  }
  const char* bad[] = {"{\"a\":}",
                       "{'a':1}",
                       "{\"a\":01}",
                       "{\"a\":1,}",
                       "{\"a\" 1}",
                       "{a:1}",
                       "{\"a\":1}}",
                       "{\"a\":\"\x01\"}",
                       "{\"a\":\"\\x\"}",
                       "{\"a\":1.}",
                       "{\"a\":tru}",
                       "{\"a\":\"\\u12\"}",
                       " {}",
                       "{}\n",
                       "{\"a\":[1 2]}"};
  for (const char* b : bad) {
    EXPECT_FALSE(accepts(true, b)) << b;
    EXPECT_FALSE(accepts(false, b)) << b;
  }
  // Whitespace runs are bounded.
  EXPECT_TRUE(accepts(true, "{" + std::string(20, ' ') + "}"));
  EXPECT_FALSE(accepts(true, "{" + std::string(21, ' ') + "}"));
}

TEST(JsonGrammar, AcceptsRandomDocumentsDumpedByNlohmann) {
  std::mt19937 rng(11);
  std::function<Json(int)> gen = [&](int depth) -> Json {
    switch (depth > 3 ? rng() % 4 : rng() % 6) {
      case 0:
        return Json(static_cast<int>(rng() % 2000) - 1000);
      case 1:
        return Json(std::ldexp(static_cast<double>(rng() % 100000), -7));
      case 2:
        return Json(std::string(1 + rng() % 5, static_cast<char>('a' + rng() % 26)) +
                    "\xC3\xA9\"\n");
      case 3:
        return rng() % 2 ? Json(nullptr) : Json(rng() % 2 == 0);
      case 4: {
        Json a = Json::array();
        for (int i = rng() % 4; i > 0; --i) a.push_back(gen(depth + 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (int i = rng() % 4; i > 0; --i)
          o[std::string(1, static_cast<char>('a' + rng() % 26))] = gen(depth + 1);
        return o;
      }
    }
  };
  for (int i = 0; i < 200; ++i) {
    Json o = Json::object();
    o["k"] = gen(0);
    EXPECT_TRUE(accepts(true, o.dump())) << o.dump();
    EXPECT_TRUE(accepts(true, o.dump(2))) << o.dump(2);
  }
}

TEST(JsonGrammar, MaskEqualsTokenByTokenAcceptance) {
  auto vocab = fragment_vocab();
  auto g = std::make_shared<const CompiledGrammar>(
      build_grammar({GrammarSpec::Kind::kJsonObject, "", {}}), vocab);
  std::mt19937 rng(5);
  std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(vocab->size())));
  for (int run = 0; run < 40; ++run) {
    GrammarMatcher m(g);
    std::string text;
    for (int step = 0; step < 60; ++step) {
      SCOPED_TRACE(text);
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->size(); ++t) {
        GrammarMatcher probe = m;
        ASSERT_EQ(token_allowed(mask, t), probe.accept_token(t)) << "token " << t;
        if (token_allowed(mask, t)) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(t));
      text += vocab->bytes(t);
      if (m.is_terminated()) break;
    }
  }
}

}  // namespace
}  // namespace tachyon::grammar
