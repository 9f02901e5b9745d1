// TextEngine over the fake model and the toy tokenizer: the text of the engine's
// outputs, stop strings across tokens (the engine told to end the sequence, its KV
// blocks freed), n > 1, beams, and the same outputs with steps queued ahead.
#include "frontend/text_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_test_util.h"
#include "frontend/fake_tokenizer.h"

namespace tachyon {
namespace {

using testing::FakeModelOptions;
using testing::FakeTokenizer;
using testing::greedy;
using testing::random_prompt;
using testing::small_engine;

std::unique_ptr<TextEngine> text_engine(const FakeModelOptions& o, EngineConfig ec,
                                        std::shared_ptr<const TextTokenizer> tok,
                                        std::shared_ptr<LanguageModel> model = nullptr) {
  if (!model) model = std::make_shared<testing::FakeModel>(o);
  return std::make_unique<TextEngine>(model, std::move(tok), ec);
}

void expect_all_free(const TextEngine& e) {
  const EngineStats s = e.stats();
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
}

TEST(TextEngine, StopStringsAcrossTokensWithHeldBackText) {
  FakeModelOptions o;
  auto tok = FakeTokenizer::standard(o.vocab, o.eos);
  auto t = text_engine(o, small_engine(512), tok);
  std::mt19937 rng(9);
  int checked = 0;
  for (int iter = 0; iter < 30; ++iter) {
    const auto prompt = random_prompt(rng, 6, o.vocab, o.eos);
    GenerateConfig c = greedy(30);
    c.ignore_eos = true;
    const auto full = t->submit({prompt, c})->wait();
    const std::string text = full.sequences[0].text;
    EXPECT_EQ(text, tok->decode(full.sequences[0].output_ids, true));
    if (text.size() < 12) continue;
    // A stop string taken from the middle of the text.
    const std::string stop = text.substr(text.size() / 2, 3);
    const size_t first = text.find(stop);
    c.stop_words_str = {stop};
    auto s = t->submit({prompt, c});
    std::string streamed;
    std::vector<int32_t> ids;
    std::optional<FinishReason> reason;
    std::string matched;
    int32_t output_len = -1;
    while (auto e = s->next(std::chrono::seconds(10))) {
      EXPECT_EQ(e->text.find(stop), std::string::npos);
      streamed += e->text;
      ids.insert(ids.end(), e->token_ids.begin(), e->token_ids.end());
      if (e->finish_reason) {
        EXPECT_FALSE(reason) << "a second last event";
        reason = e->finish_reason;
        matched = e->stop_string;
      }
      if (e->done) {
        output_len = e->timings.output_len;
        break;
      }
    }
    EXPECT_EQ(streamed, text.substr(0, first)) << "stop '" << stop << "'";
    EXPECT_EQ(reason, FinishReason::kStop);
    EXPECT_EQ(matched, stop);
    EXPECT_EQ(output_len, static_cast<int32_t>(ids.size()));
    // Generation ended with the token that completed the stop string.
    EXPECT_GE(tok->decode(ids, true).size(), first + stop.size());
    EXPECT_EQ(tok->decode(std::vector<int32_t>(ids.begin(), ids.end() - 1), true).find(stop),
              std::string::npos);
    ++checked;
  }
  EXPECT_GT(checked, 10);
  expect_all_free(*t);
}

TEST(TextEngine, AStopStringEndsItsSequenceInTheEngine) {
  // A slow model: the request would run for seconds to its length; the stop string
  // ends it after a few steps and its blocks come back.
  FakeModelOptions o;
  o.delay_us = 2000;
  auto tok = FakeTokenizer::standard(o.vocab, o.eos);
  auto t = text_engine(o, small_engine(512), tok);
  std::mt19937 rng(4);
  const auto prompt = random_prompt(rng, 6, o.vocab, o.eos);
  GenerateConfig c = greedy(400);
  c.ignore_eos = true;
  c.max_new_tokens = 12;
  const auto probe = t->submit({prompt, c})->wait();
  const std::string text = probe.sequences[0].text;
  ASSERT_GE(text.size(), 4u);
  c.stop_words_str = {text.substr(2, 2)};
  c.max_new_tokens = 400;
  const int64_t before = t->stats().tokens_generated;
  const auto r = t->submit({prompt, c})->wait();
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.sequences[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.sequences[0].text, text.substr(0, text.find(c.stop_words_str[0])));
  EXPECT_LT(t->stats().tokens_generated - before, 40);  // not the 400 of its length
  expect_all_free(*t);
}

TEST(TextEngine, ParallelSamplesEachStopOnTheirOwn) {
  FakeModelOptions o;
  auto tok = FakeTokenizer::standard(o.vocab, o.eos);
  auto t = text_engine(o, small_engine(512), tok);
  std::mt19937 rng(5);
  const auto prompt = random_prompt(rng, 9, o.vocab, o.eos);
  GenerateConfig c;
  c.num_return_sequences = 4;
  c.random_seed = 77;
  c.max_new_tokens = 25;
  c.ignore_eos = true;
  const auto all = t->submit({prompt, c})->wait();
  ASSERT_EQ(all.sequences.size(), 4u);
  c.stop_words_str = {"a", "!"};
  const auto r = t->submit({prompt, c})->wait();
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.sequences.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const std::string& full = all.sequences[i].text;
    EXPECT_EQ(full, tok->decode(all.sequences[i].output_ids, true));
    const size_t cut = std::min(full.find('a'), full.find('!'));
    EXPECT_EQ(r.sequences[i].text, full.substr(0, cut)) << "sequence " << i;
    EXPECT_EQ(r.sequences[i].finish_reason,
              cut == std::string::npos ? FinishReason::kLength : FinishReason::kStop);
    // The ids up to the one that completed the stop string.
    const auto& ids = r.sequences[i].output_ids;
    ASSERT_LE(ids.size(), all.sequences[i].output_ids.size());
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), all.sequences[i].output_ids.begin()));
  }
  expect_all_free(*t);
}

TEST(TextEngine, BeamsHaveTheirTextAndStopStringsNeedATokenizer) {
  FakeModelOptions o;
  auto tok = FakeTokenizer::standard(o.vocab, o.eos);
  auto t = text_engine(o, small_engine(512), tok);
  GenerateConfig c;
  c.num_beams = 3;
  c.num_return_sequences = 3;
  c.max_new_tokens = 8;
  const auto r = t->submit({{4, 5, 6}, c})->wait();
  ASSERT_EQ(r.sequences.size(), 3u);
  for (const auto& s : r.sequences) EXPECT_EQ(s.text, tok->decode(s.output_ids, true));

  auto bare = text_engine(o, small_engine(64), nullptr);
  GenerateConfig stops = greedy(5);
  stops.stop_words_str = {"x"};
  try {
    bare->submit({{1}, stops});
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("tokenizer"));
  }
  EXPECT_EQ(bare->stats().requests_submitted, 0);
  const auto ids = bare->submit({{1, 2}, greedy(4)})->wait();
  EXPECT_EQ(ids.sequences[0].text, "");
}

TEST(TextEngine, StopStringsAndTextMatchWithStepsQueuedAhead) {
  FakeModelOptions o;
  auto tok = FakeTokenizer::standard(o.vocab, o.eos);
  EngineConfig ec;
  ec.max_num_seqs = 16;
  ec.max_num_batched_tokens = 64;
  ec.num_kv_blocks = 512;
  ec.block_size = 4;
  ec.eos_token_ids = {o.eos};
  std::mt19937 rng(3);
  std::vector<GenerateRequest> reqs;
  const char* stops[] = {"ab", "e ", "x", "!", "ba"};
  for (int i = 0; i < 40; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 5, o.vocab, o.eos);
    r.config = greedy(25);
    r.config.ignore_eos = i % 2 == 0;
    r.config.stop_words_str = {stops[i % 5]};
    reqs.push_back(std::move(r));
  }
  std::vector<std::vector<GenerateResult>> runs;
  int64_t deferred = 0;
  for (bool overlap : {false, true}) {
    ec.overlap_steps = overlap;
    auto model = std::make_shared<testing::DeviceSamplingModel>(o);
    auto t = text_engine(o, ec, tok, model);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(t->submit(r));
    runs.emplace_back();
    for (auto& s : streams) runs.back().push_back(s->wait());
    EXPECT_EQ(model->violations(), 0);
    expect_all_free(*t);
    deferred = model->deferred_tokens();
  }
  int stopped = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& x = runs[0][i].sequences.at(0);
    const auto& y = runs[1][i].sequences.at(0);
    EXPECT_EQ(x.output_ids, y.output_ids) << "request " << i;
    EXPECT_EQ(x.text, y.text) << "request " << i;
    EXPECT_EQ(x.finish_reason, y.finish_reason) << "request " << i;
    EXPECT_EQ(x.text.find(reqs[i].config.stop_words_str[0]), std::string::npos);
    stopped += x.finish_reason == FinishReason::kStop;
  }
  EXPECT_GT(stopped, 10);
  EXPECT_GT(deferred, 50);
}

}  // namespace
}  // namespace tachyon
