// Constrained decoding with the real trained model (models/tiny-kjv-chat) and its
// tokenizer through TextEngine: at temperature 1 over many seeds, every output matches its
// regex (checked with std::regex), is one of its choices, or parses as a JSON object
// (nlohmann) unless max_new_tokens cut it, in which case it is still a prefix the JSON
// grammar accepts. n > 1 samples and beams keep a matcher each.
#include <gtest/gtest.h>

#include <regex>

#include "core/json.h"
#include "frontend/text_engine.h"
#include "grammar/compile.h"
#include "model/loader.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;

struct Kjv {
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<int32_t> eos;
};

const Kjv& kjv() {
  static const Kjv k = [] {
    Kjv k;
    k.model = load_model(kRoot + "/models/tiny-kjv-chat");
    k.tokenizer = Tokenizer::load(kRoot + "/models/tiny-kjv-chat");
    for (int64_t e : k.model->config().eos_token_ids) k.eos.push_back(static_cast<int32_t>(e));
    return k;
  }();
  return k;
}

std::unique_ptr<TextEngine> engine() {
  EngineConfig c;
  c.num_kv_blocks = 512;
  c.block_size = 16;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 512;
  c.eos_token_ids = kjv().eos;
  return std::make_unique<TextEngine>(kjv().model,
                                      make_text_tokenizer(kjv().tokenizer, c.eos_token_ids), c);
}

GenerateConfig sampled(uint64_t seed, int32_t max_new, grammar::GrammarSpec spec) {
  GenerateConfig c;
  c.temperature = 1.0f;
  c.random_seed = seed;
  c.max_new_tokens = max_new;
  c.constraint = std::move(spec);
  return c;
}

std::vector<int32_t> prompt(const std::string& text) {
  return kjv().tokenizer->encode(text, true);
}

TEST(KjvGrammar, EverySampleMatchesItsRegex) {
  auto e = engine();
  const std::string pattern = "(yes|no|maybe), [a-z]{2,8}( [A-Z][a-z]{1,6})?\\.";
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    GenerateConfig c = sampled(seed, 40, {grammar::GrammarSpec::Kind::kRegex, pattern, {}});
    c.num_return_sequences = 2;  // a fork keeps its own matcher
    streams.push_back(e->submit({prompt("And God said, Let there be"), c}));
  }
  const std::regex re(pattern);
  std::set<std::string> distinct;
  for (auto& s : streams) {
    const GenerateResult r = s->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    ASSERT_EQ(r.sequences.size(), 2u);
    for (const SequenceOutput& o : r.sequences) {
      EXPECT_EQ(o.finish_reason, FinishReason::kStop) << o.text;
      EXPECT_TRUE(std::regex_match(o.text, re)) << o.text;
      distinct.insert(o.text);
    }
  }
  EXPECT_GT(distinct.size(), 10u);  // sampled, not one forced text
}

TEST(KjvGrammar, EveryChoiceOutputIsAChoiceAlsoWithBeams) {
  auto e = engine();
  const std::vector<std::string> choices{"Genesis", "Exodus", "the LORD", "the LORD God", "Moses"};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint64_t seed = 0; seed < 24; ++seed)
    streams.push_back(
        e->submit({prompt("In the beginning"),
                   sampled(seed, 16, {grammar::GrammarSpec::Kind::kChoice, "", choices})}));
  GenerateConfig beams = sampled(0, 16, {grammar::GrammarSpec::Kind::kChoice, "", choices});
  beams.num_beams = 3;
  beams.num_return_sequences = 3;
  streams.push_back(e->submit({prompt("In the beginning"), beams}));
  std::set<std::string> seen;
  for (auto& s : streams) {
    const GenerateResult r = s->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    for (const SequenceOutput& o : r.sequences) {
      EXPECT_NE(std::find(choices.begin(), choices.end(), o.text), choices.end()) << o.text;
      EXPECT_EQ(o.finish_reason, FinishReason::kStop) << o.text;
      seen.insert(o.text);
    }
  }
  EXPECT_GE(seen.size(), 2u);
}

TEST(KjvGrammar, EveryJsonObjectOutputParsesUnlessCut) {
  auto e = engine();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint64_t seed = 0; seed < 24; ++seed)
    streams.push_back(
        e->submit({prompt("The book of the generations:"),
                   sampled(seed, 48, {grammar::GrammarSpec::Kind::kJsonObject, "", {}})}));
  int complete = 0;
  for (auto& s : streams) {
    const GenerateResult r = s->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    const SequenceOutput& o = r.sequences.at(0);
    ASSERT_FALSE(o.text.empty());
    EXPECT_EQ(o.text[0], '{') << o.text;
    if (o.finish_reason == FinishReason::kStop) {
      ++complete;
      Json j;
      ASSERT_NO_THROW(j = Json::parse(o.text)) << o.text;
      EXPECT_TRUE(j.is_object()) << o.text;
    } else {
      EXPECT_EQ(o.finish_reason, FinishReason::kLength);
      EXPECT_FALSE(Json::accept(o.text)) << o.text;
    }
  }
  EXPECT_GT(complete, 0);
}

TEST(KjvGrammar, BadConstraintsAreRefusedAtSubmission) {
  auto e = engine();
  auto refused = [&](grammar::GrammarSpec spec, const std::string& what) {
    try {
      e->submit({prompt("In the beginning"), sampled(1, 8, std::move(spec))});
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& x) {
      EXPECT_NE(std::string(x.what()).find(what), std::string::npos) << x.what();
    }
  };
  refused({grammar::GrammarSpec::Kind::kRegex, "(a)\\1", {}},
          "regex: backreferences are not supported");
  refused({grammar::GrammarSpec::Kind::kGrammar, "root ::= item", {}},
          "grammar: rule 'item' is not defined");
  // The engine alone (no tokenizer) cannot compile a constraint.
  GenerateConfig c = sampled(1, 8, {grammar::GrammarSpec::Kind::kRegex, "a", {}});
  EXPECT_THROW(e->engine().submit({prompt("In"), c}), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
