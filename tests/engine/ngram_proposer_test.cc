// Prompt lookup: the tokens after the most recent earlier occurrence of the longest
// matching suffix, and the engine's outputs with it equal to plain decoding's.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/ngram_proposer.h"
#include "engine_test_util.h"

namespace tachyon::testing {
namespace {

using V = std::vector<int32_t>;

TEST(NgramProposer, ProposesWhatFollowedTheLongestMatchMostRecently) {
  // Suffix [7 8 9]: seen at 4 (followed by 1 2 3) — the longest match wins over the more
  // recent [8 9] at 9.
  const V t = {5, 6, 0, 0, 7, 8, 9, 1, 2, 8, 9, 4, 4, 7, 8, 9};
  EXPECT_EQ(NgramProposer::lookup(t, 1, 3, 3), (V{1, 2, 8}));
  EXPECT_EQ(NgramProposer::lookup(t, 1, 3, 10), (V{1, 2, 8, 9, 4, 4, 7, 8, 9}));
  // Up to two tokens matched: [8 9] most recently at 9 (followed by 4 4).
  EXPECT_EQ(NgramProposer::lookup(t, 1, 2, 2), (V{4, 4}));
  // Matches shorter than min_match do not count.
  EXPECT_EQ(NgramProposer::lookup(V{1, 2, 3, 9, 3}, 2, 4, 3), V{});
  EXPECT_EQ(NgramProposer::lookup(V{1, 2, 3, 9, 3}, 1, 4, 3), (V{9, 3}));
  EXPECT_EQ(NgramProposer::lookup(V{1, 2, 3}, 1, 4, 3), V{});
  EXPECT_EQ(NgramProposer::lookup(V{4}, 1, 4, 3), V{});
  EXPECT_EQ(NgramProposer::lookup(V{4, 4}, 1, 4, 3), V{4});
  EXPECT_EQ(NgramProposer::lookup(t, 1, 3, 0), V{});
  // A repeating pattern continues itself.
  EXPECT_EQ(NgramProposer::lookup(V{1, 2, 1, 2, 1, 2}, 1, 4, 5), (V{1, 2}));
}

TEST(NgramProposer, RefusesBadMatchLengths) {
  EXPECT_THROW(NgramProposer(0, 3), InvalidArgument);
  EXPECT_THROW(NgramProposer(3, 2), InvalidArgument);
  EXPECT_NO_THROW(NgramProposer(2, 2));
}

TEST(NgramProposer, GreedyOutputsAreThoseOfPlainDecoding) {
  // Prompts that repeat a passage, and some without repetition.
  FakeModelOptions o;
  o.vocab = 16;  // small: the output often repeats the context, and the lookup is right
  o.eos = 2;
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i) {
    auto p = random_prompt(rng, 6 + i, o.vocab, o.eos);
    if (i % 2 == 0) {
      const auto copy = p;
      p.insert(p.end(), copy.begin(), copy.end());
    }
    prompts.push_back(p);
  }
  EngineConfig c = small_engine(256);
  c.proposer = std::make_shared<NgramProposer>(1, 3);
  c.num_speculative_tokens = 5;
  auto t = make_engine(o, c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  GenerateConfig cfg = greedy(40);
  cfg.return_logprobs = true;
  for (const auto& p : prompts) streams.push_back(t.engine->submit({p, cfg}));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerateResult r = streams[i]->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    const RefOutput ref = reference_generate(prompts[i], cfg, o, 0, 0, 40);
    EXPECT_EQ(r.sequences.at(0).output_ids, ref.ids) << i;
    EXPECT_EQ(r.sequences.at(0).logprobs, ref.logprobs) << i;
  }
  const EngineStats s = t.engine->stats();
  EXPECT_EQ(t.model->violations(), 0);
  EXPECT_GT(s.spec_num_draft_tokens, 0);
  EXPECT_GT(s.spec_num_accepted_tokens, 0);
}

}  // namespace
}  // namespace tachyon::testing
