// The benchmarks' synthetic workloads (cli/bench_workload.h).
#include "cli/bench_workload.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"

namespace tachyon::cli {
namespace {

PromptShape shape(int64_t input_len, int64_t prefix, double ratio = 0) {
  PromptShape s;
  s.low_token = 16;
  s.high_token = 30000;
  s.input_len = input_len;
  s.shared_prefix_len = prefix;
  s.range_ratio = ratio;
  return s;
}

TEST(BenchWorkload, SharedPrefixThenOwnParts) {
  std::mt19937_64 rng(7);
  const auto prompts = make_random_prompts(shape(12, 20), 5, rng);
  ASSERT_EQ(prompts.size(), 5u);
  for (const auto& p : prompts) {
    ASSERT_EQ(p.size(), 32u);
    EXPECT_TRUE(std::equal(p.begin(), p.begin() + 20, prompts[0].begin()));
    for (int32_t t : p) {
      EXPECT_GE(t, 16);
      EXPECT_LE(t, 30000);
    }
  }
  // The own parts differ from prompt to prompt.
  for (size_t i = 1; i < prompts.size(); ++i)
    EXPECT_FALSE(std::equal(prompts[i].begin() + 20, prompts[i].end(), prompts[0].begin() + 20))
        << i;
}

TEST(BenchWorkload, WithoutPrefixPromptsDiffer) {
  std::mt19937_64 rng(1);
  const auto prompts = make_random_prompts(shape(16, 0, 0.5), 20, rng);
  for (const auto& p : prompts) {
    EXPECT_GE(p.size(), 8u);
    EXPECT_LE(p.size(), 24u);
  }
  EXPECT_NE(prompts[0], prompts[1]);
}

TEST(BenchWorkload, DeterministicFromTheSeed) {
  std::mt19937_64 a(42), b(42), c(43);
  EXPECT_EQ(make_random_prompts(shape(10, 6), 4, a), make_random_prompts(shape(10, 6), 4, b));
  std::mt19937_64 d(42);
  EXPECT_NE(make_random_prompts(shape(10, 6), 4, c), make_random_prompts(shape(10, 6), 4, d));
  std::mt19937_64 e(5), f(5);
  const auto x = make_conversations(shape(8, 4), 3, 3, e);
  const auto y = make_conversations(shape(8, 4), 3, 3, f);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i)
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(x[i].user_part(k), y[i].user_part(k));
}

TEST(BenchWorkload, TurnExtendsThePreviousTurn) {
  std::mt19937_64 rng(3);
  auto convs = make_conversations(shape(6, 10), 2, 3, rng);
  ASSERT_EQ(convs.size(), 2u);
  // The shared prefix opens both conversations' first turns, and only those.
  EXPECT_TRUE(std::equal(convs[0].prompt().begin(), convs[0].prompt().begin() + 10,
                         convs[1].prompt().begin()));
  EXPECT_EQ(convs[0].user_part(0).size(), 16u);
  EXPECT_EQ(convs[0].user_part(1).size(), 6u);
  EXPECT_NE(convs[0].user_part(1), convs[1].user_part(1));
  Conversation& c = convs[0];
  EXPECT_EQ(c.turns(), 3);
  EXPECT_EQ(c.turn(), 0);
  const std::vector<int32_t> turn0 = c.prompt();
  const std::vector<int32_t> out0 = {5, 6, 7};
  c.answer(out0);
  EXPECT_EQ(c.turn(), 1);
  std::vector<int32_t> want = turn0;
  want.insert(want.end(), out0.begin(), out0.end());
  want.insert(want.end(), c.user_part(1).begin(), c.user_part(1).end());
  EXPECT_EQ(c.prompt(), want);
  const std::vector<int32_t> out1 = {9};
  c.answer(out1);
  want.insert(want.end(), out1.begin(), out1.end());
  want.insert(want.end(), c.user_part(2).begin(), c.user_part(2).end());
  EXPECT_EQ(c.prompt(), want);
  EXPECT_FALSE(c.done());
  c.answer({1, 2});
  EXPECT_TRUE(c.done());
  EXPECT_THROW(c.answer({}), InvalidArgument);
}

TEST(BenchWorkload, BadShapesAndLengthsAreRefused) {
  std::mt19937_64 rng(0);
  EXPECT_THROW(make_random_prompts(shape(8, -1), 2, rng), InvalidArgument);
  EXPECT_THROW(make_conversations(shape(8, 0), 2, 0, rng), InvalidArgument);
  EXPECT_THROW(make_random_prompts(shape(0, 0), 2, rng), InvalidArgument);
  // 4 + 3 turns of 8 + 2 outputs of 5 = 38.
  EXPECT_EQ(longest_prompt(shape(8, 4), 3, 5), 38);
  EXPECT_NO_THROW(check_fits(shape(8, 4), 3, 5, 39));
  try {
    check_fits(shape(8, 4), 3, 5, 38);
    ADD_FAILURE() << "38 tokens fit a maximum length of 38";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    for (const char* flag : {"--shared-prefix-len", "--multi-turn", "--input-len", "--output-len"})
      EXPECT_NE(m.find(flag), std::string::npos) << m;
  }
  EXPECT_THROW(check_fits(shape(100, 30, 0.5), 1, 5, 180), InvalidArgument);
  EXPECT_NO_THROW(check_fits(shape(100, 30, 0.5), 1, 5, 181));
}

}  // namespace
}  // namespace tachyon::cli
