// The output processor on hand-made engine events: text per event, stop strings across
// tokens, the engine asked to end a stopped sequence and its later events dropped,
// min_new_tokens, n > 1 and beams.
#include "frontend/output_processor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "frontend/fake_tokenizer.h"

namespace tachyon {
namespace {

using testing::FakeTokenizer;

// Pieces: 0 "a", 1 "b", 2 "</s>" (special), 3 "c", 4 " ", 5 "\xE2", 6 "\x82", 7 "\xAC".
std::shared_ptr<FakeTokenizer> toy() {
  return std::make_shared<FakeTokenizer>(
      std::vector<std::string>{"a", "b", "</s>", "c", " ", "\xE2", "\x82", "\xAC"},
      std::vector<int32_t>{2}, std::vector<int32_t>{2});
}

StreamEvent token(int32_t index, int32_t t, std::optional<FinishReason> finish = std::nullopt) {
  StreamEvent e;
  e.index = index;
  e.token_ids = {t};
  e.logprobs = {-0.5f};
  e.finish_reason = finish;
  return e;
}

StreamEvent finish(int32_t index, FinishReason r) {
  StreamEvent e;
  e.index = index;
  e.finish_reason = r;
  return e;
}

StreamEvent done(int32_t output_len, std::vector<double> gaps = {}) {
  StreamEvent e;
  e.index = -1;
  e.done = true;
  e.timings.output_len = output_len;
  e.timings.token_gaps_ms = std::move(gaps);
  return e;
}

struct Processed {
  std::vector<StreamEvent> out;
  std::vector<int32_t> stopped;  // indices the engine was asked to end
};

Processed run(const GenerateConfig& c, std::vector<StreamEvent> in, bool skip = true) {
  Processed r;
  OutputProcessor p(toy(), c, skip, [&](int32_t i) { r.stopped.push_back(i); });
  // One event a batch, as the engine's loop may hand them over.
  for (auto& e : in) {
    std::vector<StreamEvent> batch;
    batch.push_back(std::move(e));
    for (auto& o : p.process(std::move(batch))) r.out.push_back(std::move(o));
  }
  return r;
}

std::string text_of(const Processed& r, int32_t index) {
  std::string s;
  for (const auto& e : r.out)
    if (e.index == index) s += e.text;
  return s;
}

TEST(OutputProcessor, TextPerEventWithIncompleteCharactersHeldBack) {
  GenerateConfig c;
  Processed r = run(c, {token(0, 0), token(0, 5), token(0, 6), token(0, 7), token(0, 2),
                        finish(0, FinishReason::kStop), done(5)});
  ASSERT_EQ(r.out.size(), 7u);
  EXPECT_EQ(r.out[0].text, "a");
  EXPECT_EQ(r.out[1].text, "");
  EXPECT_EQ(r.out[2].text, "");
  EXPECT_EQ(r.out[3].text, "\xE2\x82\xAC");
  EXPECT_EQ(r.out[4].text, "");  // special, skipped
  EXPECT_TRUE(r.stopped.empty());
  EXPECT_EQ(r.out[6].timings.output_len, 5);
}

TEST(OutputProcessor, SpecialTokensKeptWhenNotSkipped) {
  GenerateConfig c;
  Processed r = run(c, {token(0, 0), token(0, 2, FinishReason::kLength), done(2)}, /*skip=*/false);
  EXPECT_EQ(text_of(r, 0), "a</s>");
}

TEST(OutputProcessor, StopStringAcrossTokensEndsTheSequenceAndDropsTheRest) {
  GenerateConfig c;
  c.stop_words_str = {"bc"};
  // "a", "b" (held: may begin "bc"), "c" completes it; the engine, not yet told, sends
  // two more tokens and then the end it was asked for.
  Processed r = run(c, {token(0, 0), token(0, 1), token(0, 3), token(0, 0), token(0, 1),
                        finish(0, FinishReason::kStop), done(5, {1, 2, 3, 4})});
  ASSERT_EQ(r.out.size(), 4u);
  EXPECT_EQ(r.out[0].text, "a");
  EXPECT_EQ(r.out[1].text, "");
  EXPECT_EQ(r.out[2].text, "");
  EXPECT_EQ(r.out[2].token_ids, std::vector<int32_t>{3});
  EXPECT_EQ(r.out[2].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.out[2].stop_string, "bc");
  EXPECT_EQ(r.stopped, std::vector<int32_t>{0});
  ASSERT_TRUE(r.out[3].done);
  EXPECT_EQ(r.out[3].timings.output_len, 3);  // the two dropped tokens do not count
  EXPECT_EQ(r.out[3].timings.token_gaps_ms, (std::vector<double>{1, 2}));
}

TEST(OutputProcessor, StopOnATokenThatAlsoEndsTheSequenceIsNotSentToTheEngine) {
  GenerateConfig c;
  c.stop_words_str = {"ab"};
  Processed r = run(c, {token(0, 0), token(0, 1, FinishReason::kLength), done(2)});
  ASSERT_EQ(r.out.size(), 3u);
  EXPECT_EQ(r.out[1].finish_reason, FinishReason::kStop);  // the stop string wins
  EXPECT_EQ(text_of(r, 0), "");
  EXPECT_TRUE(r.stopped.empty());
}

TEST(OutputProcessor, HeldBackTextIsSentAtTheEndUnlessCancelled) {
  GenerateConfig c;
  c.stop_words_str = {"bc"};
  Processed ended = run(c, {token(0, 0), token(0, 1), finish(0, FinishReason::kLength), done(2)});
  EXPECT_EQ(text_of(ended, 0), "ab");
  Processed cancelled =
      run(c, {token(0, 0), token(0, 1), finish(0, FinishReason::kCancelled), done(2)});
  EXPECT_EQ(text_of(cancelled, 0), "a");
}

TEST(OutputProcessor, MinNewTokensLetsEarlierTextPassUnmatched) {
  GenerateConfig c;
  c.stop_words_str = {"a"};
  c.min_new_tokens = 3;
  Processed r = run(c, {token(0, 0), token(0, 0), token(0, 1), token(0, 0), token(0, 3), done(5)});
  EXPECT_EQ(text_of(r, 0), "aab");
  EXPECT_EQ(r.stopped, std::vector<int32_t>{0});
  EXPECT_EQ(r.out.size(), 5u);  // the last token dropped
}

TEST(OutputProcessor, EachSequenceHasItsOwnState) {
  GenerateConfig c;
  c.num_return_sequences = 2;
  c.stop_words_str = {"bb"};
  Processed r = run(c, {token(0, 1), token(1, 5), token(0, 1), token(1, 6), token(0, 0),
                        token(1, 7), token(1, 1, FinishReason::kLength), done(5)});
  EXPECT_EQ(text_of(r, 0), "");
  EXPECT_EQ(text_of(r, 1),
            "\xE2\x82\xAC"
            "b");
  EXPECT_EQ(r.stopped, std::vector<int32_t>{0});
  EXPECT_EQ(r.out.back().timings.output_len, 4);
}

TEST(OutputProcessor, BeamsAreDecodedWholeAndIgnoreStopStrings) {
  GenerateConfig c;
  c.num_beams = 2;
  c.num_return_sequences = 2;
  c.stop_words_str = {"b"};
  StreamEvent b0 = token(0, 0, FinishReason::kLength);
  b0.token_ids = {0, 1, 5, 6, 7};
  StreamEvent b1 = token(1, 3, FinishReason::kStop);
  Processed r = run(c, {b0, b1, done(6)});
  EXPECT_EQ(text_of(r, 0), "ab\xE2\x82\xAC");
  EXPECT_EQ(text_of(r, 1), "c");
  EXPECT_TRUE(r.stopped.empty());
}

TEST(OutputProcessor, WithoutATokenizerIdsPassAndStopStringsAreRefused) {
  GenerateConfig c;
  OutputProcessor p(nullptr, c, true, nullptr);
  std::vector<StreamEvent> in;
  in.push_back(token(0, 3));
  const auto out = p.process(std::move(in));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token_ids, std::vector<int32_t>{3});
  EXPECT_EQ(out[0].text, "");
  c.stop_words_str = {"x"};
  try {
    OutputProcessor refused(nullptr, c, true, nullptr);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("tokenizer"));
  }
}

}  // namespace
}  // namespace tachyon
