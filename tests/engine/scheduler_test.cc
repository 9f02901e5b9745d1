#include "engine/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <span>

#include <string>

namespace tachyon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// "seq:start+n" per scheduled sequence, with '*' when it samples.
std::string describe(const SchedulerOutput& out) {
  std::string s;
  for (const auto& q : out.seqs) {
    if (!s.empty()) s += " ";
    s += std::to_string(q.seq_id) + ":" + std::to_string(q.start) + "+" +
         std::to_string(q.num_tokens) + (q.num_logits ? "*" : "");
  }
  return s;
}

struct Fixture {
  Fixture(int32_t blocks, int32_t block_size, SchedulerConfig c, int32_t swap_blocks = 0)
      : kv(blocks, block_size, swap_blocks), s(c, &kv) {}
  KVCacheManager kv;
  Scheduler s;
};

SchedulerConfig config(int32_t seqs, int32_t tokens, int32_t reserve = 0) {
  SchedulerConfig c;
  c.max_num_seqs = seqs;
  c.max_num_batched_tokens = tokens;
  c.reserve_blocks = reserve;
  return c;
}

TEST(Scheduler, ChunkedPrefillThenDecodeWithNewArrival) {
  Fixture f(16, 4, config(4, 8));
  f.s.add_group(1, 10, 20, 1);
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(1));

  auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:0+8");
  EXPECT_THAT(out.sampled_groups, IsEmpty());
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1));
  EXPECT_THAT(f.s.running_groups(), ElementsAre(1));
  EXPECT_EQ(f.s.seq_state(10).num_computed, 8);

  out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:8+8");
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1, 2, 3));

  out = f.s.schedule();  // the last 4 prompt tokens: the request samples
  EXPECT_EQ(describe(out), "10:16+4*");
  EXPECT_THAT(out.sampled_groups, ElementsAre(1));
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(out.num_batched_tokens, 4);

  f.s.append_token(10);
  f.s.add_group(2, 20, 10, 1);
  out = f.s.schedule();  // a decode and the newcomer's first chunk in one step
  EXPECT_EQ(describe(out), "10:20+1* 20:0+7");
  EXPECT_THAT(out.sampled_groups, ElementsAre(1));
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(out.seqs[1].block_table, ElementsAre(6, 7));
  EXPECT_EQ(out.num_batched_tokens, 8);
  EXPECT_EQ(f.kv.num_free_blocks(), 8);

  f.s.append_token(10);
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:21+1* 20:7+3*");
  EXPECT_THAT(out.sampled_groups, ElementsAre(1, 2));

  f.s.remove_group(1);
  f.s.remove_group(2);
  EXPECT_FALSE(f.s.has_work());
  EXPECT_EQ(f.kv.num_free_blocks(), 16);
}

TEST(Scheduler, LongPromptDoesNotStallDecodes) {
  Fixture f(64, 4, config(4, 8));
  f.s.add_group(1, 10, 2, 1);
  EXPECT_EQ(describe(f.s.schedule()), "10:0+2*");
  f.s.append_token(10);
  f.s.add_group(2, 20, 30, 1);
  const char* expected[] = {"10:2+1* 20:0+7", "10:3+1* 20:7+7", "10:4+1* 20:14+7",
                            "10:5+1* 20:21+7", "10:6+1* 20:28+2*"};
  for (const char* e : expected) {
    EXPECT_EQ(describe(f.s.schedule()), e);
    f.s.append_token(10);
  }
}

// A prefix-LM prompt's bidirectional context is computed in one chunk: the chunk that
// starts it covers it whole, or waits for the budget (without preempting anyone), while
// a causal prompt of the same length is chunked to the budget.
TEST(Scheduler, BidirectionalContextIsOneChunk) {
  Fixture f(64, 4, config(4, 12));
  f.s.add_group(1, 10, 2, 1);
  f.s.add_group(2, 20, 2, 1);
  EXPECT_EQ(describe(f.s.schedule()), "10:0+2* 20:0+2*");
  f.s.append_token(10);
  f.s.append_token(20);
  f.s.add_group(3, 30, 14, 1, PromptLayout{11, true, -1});
  // Two decodes leave 10 tokens: not enough for the context of 11.
  auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:2+1* 20:2+1*");
  EXPECT_THAT(out.preempted_groups, IsEmpty());
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(3));
  f.s.append_token(10);
  f.s.append_token(20);
  f.s.remove_group(2);
  // One decode leaves 11: the context and nothing more, then the rest of the prompt.
  EXPECT_EQ(describe(f.s.schedule()), "10:3+1* 30:0+11");
  f.s.append_token(10);
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:4+1* 30:11+3*");
  EXPECT_EQ(out.seqs[1].layout, (PromptLayout{11, true, -1}));

  // The same prompt, causal: chunked to what the decode leaves.
  Fixture g(64, 4, config(4, 12));
  g.s.add_group(1, 10, 2, 1);
  EXPECT_EQ(describe(g.s.schedule()), "10:0+2*");
  g.s.append_token(10);
  g.s.add_group(2, 20, 2, 1);
  g.s.add_group(3, 30, 14, 1);
  EXPECT_EQ(describe(g.s.schedule()), "10:2+1* 20:0+2* 30:0+9");

  // A context no step can hold is a caller's error (the engine refuses it first).
  EXPECT_THROW(g.s.add_group(4, 40, 20, 1, PromptLayout{13, true, -1}), Error);
}

TEST(Scheduler, FifoAdmissionHeadOfLineBlocks) {
  Fixture f(64, 4, config(2, 64));
  f.s.add_group(1, 10, 4, 1);
  f.s.add_group(2, 20, 4, 2);  // needs two seats
  f.s.add_group(3, 30, 4, 1);  // would fit, but must not overtake request 2
  auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:0+4*");
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(2, 3));
  f.s.remove_group(1);
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "20:0+4*");
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(3));
  f.s.remove_group(2);
  EXPECT_EQ(describe(f.s.schedule()), "30:0+4*");
}

TEST(Scheduler, ReserveHoldsBackAdmissionsButNotALoneRequest) {
  Fixture f(8, 4, config(4, 64, /*reserve=*/2));
  f.s.add_group(1, 10, 20, 1);  // 5 blocks: more than 8 - reserve allows, but alone
  f.s.add_group(2, 20, 8, 1);   // 2 blocks: 3 free, 2 + 2 > 3
  EXPECT_EQ(describe(f.s.schedule()), "10:0+20*");
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(2));
  f.s.append_token(10);
  EXPECT_EQ(describe(f.s.schedule()), "10:20+1*");  // running requests use the reserve
  EXPECT_EQ(f.kv.num_free_blocks(), 2);
  f.s.remove_group(1);
  EXPECT_EQ(describe(f.s.schedule()), "20:0+8*");
}

TEST(Scheduler, PreemptsTheMostRecentAndRecomputesIt) {
  Fixture f(6, 4, config(4, 8));
  f.s.add_group(1, 10, 8, 1);
  f.s.add_group(2, 20, 8, 1);
  EXPECT_EQ(describe(f.s.schedule()), "10:0+8*");
  f.s.append_token(10);  // A: 9 tokens
  EXPECT_EQ(describe(f.s.schedule()), "10:8+1* 20:0+7");
  f.s.append_token(10);  // A: 10
  EXPECT_EQ(describe(f.s.schedule()), "10:9+1* 20:7+1*");
  f.s.append_token(10);  // A: 11
  f.s.append_token(20);  // B: 9
  EXPECT_EQ(describe(f.s.schedule()), "10:10+1* 20:8+1*");
  EXPECT_EQ(f.kv.num_free_blocks(), 0);
  f.s.append_token(10);
  f.s.append_token(20);
  EXPECT_EQ(describe(f.s.schedule()), "10:11+1* 20:9+1*");
  f.s.append_token(10);  // A: 13, needs a fourth block at position 12
  f.s.append_token(20);  // B: 11

  auto out = f.s.schedule();
  EXPECT_THAT(out.preempted_groups, ElementsAre(2));
  EXPECT_EQ(describe(out), "10:12+1*");
  // B's blocks, holding nothing cached, went to the front of the free list.
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(2));
  EXPECT_EQ(f.s.seq_state(20).num_computed, 0);
  EXPECT_EQ(f.s.seq_state(20).num_tokens, 11);
  EXPECT_EQ(f.s.num_preemptions(), 1);

  f.s.append_token(10);
  EXPECT_EQ(describe(f.s.schedule()), "10:13+1*");  // B's 3 blocks do not fit beside A's 4
  f.s.remove_group(1);
  // B recomputes its 11 tokens (prompt and generated) before sampling again.
  EXPECT_EQ(describe(f.s.schedule()), "20:0+8");
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "20:8+3*");
  EXPECT_THAT(out.sampled_groups, ElementsAre(2));
}

TEST(Scheduler, PreemptsItselfWhenItIsTheMostRecent) {
  Fixture f(3, 4, config(4, 8));
  f.s.add_group(1, 10, 4, 1);
  f.s.add_group(2, 20, 4, 1);
  EXPECT_EQ(describe(f.s.schedule()), "10:0+4* 20:0+4*");
  f.s.append_token(10);
  f.s.append_token(20);
  // A takes the last free block; B finds none and, being the most recent, yields.
  auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:4+1*");
  EXPECT_THAT(out.preempted_groups, ElementsAre(2));
  EXPECT_EQ(f.kv.num_free_blocks(), 1);
}

TEST(Scheduler, ForkedSequencesCopyTheSharedBlockOnWrite) {
  Fixture f(8, 4, config(4, 16));
  f.s.add_group(1, 10, 6, 3);
  auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:0+6*");
  f.s.fork_seq(10, 11);
  f.s.fork_seq(10, 12);
  for (int64_t s : {10, 11, 12}) f.s.append_token(s);
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:6+1* 11:6+1* 12:6+1*");
  EXPECT_THAT(out.copies, ElementsAre(BlockCopy{1, 2}, BlockCopy{1, 3}));
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 2));
  EXPECT_THAT(out.seqs[1].block_table, ElementsAre(0, 3));
  EXPECT_THAT(out.seqs[2].block_table, ElementsAre(0, 1));  // the last holder writes in place
  EXPECT_THAT(out.sampled_groups, ElementsAre(1));
  f.s.remove_seq(11);
  EXPECT_THAT(f.s.group_seqs(1), ElementsAre(10, 12));
  f.s.remove_group(1);
  EXPECT_EQ(f.kv.num_free_blocks(), 8);
}

TEST(Scheduler, PreemptedGroupRecomputesAllItsSequencesBeforeSampling) {
  Fixture f(6, 4, config(3, 4));
  f.s.add_group(100, 1, 4, 1);
  f.s.add_group(200, 10, 3, 2);
  EXPECT_EQ(describe(f.s.schedule()), "1:0+4*");
  f.s.append_token(1);
  EXPECT_EQ(describe(f.s.schedule()), "1:4+1* 10:0+3*");
  f.s.fork_seq(10, 11);
  for (int64_t s : {1, 10, 11}) f.s.append_token(s);
  auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "1:5+1* 10:3+1* 11:3+1*");
  EXPECT_THAT(out.copies, ElementsAre(BlockCopy{2, 3}));
  for (int64_t s : {1, 10, 11}) f.s.append_token(s);
  EXPECT_EQ(describe(f.s.schedule()), "1:6+1* 10:4+1* 11:4+1*");
  for (int64_t s : {1, 10, 11}) f.s.append_token(s);
  EXPECT_EQ(describe(f.s.schedule()), "1:7+1* 10:5+1* 11:5+1*");
  EXPECT_EQ(f.kv.num_free_blocks(), 0);
  for (int64_t s : {1, 10, 11}) f.s.append_token(s);
  // Request 100 needs a block at position 8: request 200, the most recent, gives way.
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "1:8+1*");
  EXPECT_THAT(out.preempted_groups, ElementsAre(200));
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1, 2));
  f.s.remove_group(100);
  // Both sequences (7 tokens each) are recomputed in chunks; the request samples only
  // in the step that brings both up to date.
  EXPECT_EQ(describe(f.s.schedule()), "10:0+4");
  EXPECT_EQ(describe(f.s.schedule()), "10:4+2 11:0+2");
  EXPECT_EQ(describe(f.s.schedule()), "11:2+4");
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:6+1* 11:6+1*");
  EXPECT_THAT(out.sampled_groups, ElementsAre(200));
  f.s.remove_group(200);
  EXPECT_EQ(f.kv.num_free_blocks(), 6);
}

// The scenario of PreemptsTheMostRecentAndRecomputesIt up to the step where A needs B's
// blocks (6 blocks of 4 tokens): A at 13 tokens, B (3 blocks) at 11 with 10 computed.
SchedulerOutput run_to_preemption(Fixture& f) {
  f.s.add_group(1, 10, 8, 1);
  f.s.add_group(2, 20, 8, 1);
  EXPECT_EQ(describe(f.s.schedule()), "10:0+8*");
  f.s.append_token(10);
  EXPECT_EQ(describe(f.s.schedule()), "10:8+1* 20:0+7");
  f.s.append_token(10);
  EXPECT_EQ(describe(f.s.schedule()), "10:9+1* 20:7+1*");
  f.s.append_token(10);
  f.s.append_token(20);
  EXPECT_EQ(describe(f.s.schedule()), "10:10+1* 20:8+1*");
  f.s.append_token(10);
  f.s.append_token(20);
  EXPECT_EQ(describe(f.s.schedule()), "10:11+1* 20:9+1*");
  f.s.append_token(10);
  f.s.append_token(20);
  return f.s.schedule();
}

// With swap space, B's blocks go to host memory and come back, and B goes on from the
// token it was at.
TEST(Scheduler, SwapsOutTheMostRecentAndResumesWhereItLeftOff) {
  Fixture f(6, 4, config(4, 8), 4);
  auto out = run_to_preemption(f);
  EXPECT_THAT(out.preempted_groups, ElementsAre(2));
  EXPECT_EQ(describe(out), "10:12+1*");
  EXPECT_THAT(out.swap_out, ElementsAre(BlockCopy{3, 0}, BlockCopy{4, 1}, BlockCopy{5, 2}));
  EXPECT_THAT(out.swap_in, IsEmpty());
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(f.s.swapped_groups(), ElementsAre(2));
  EXPECT_THAT(f.s.waiting_groups(), IsEmpty());
  EXPECT_EQ(f.s.seq_state(20).num_computed, 10);
  EXPECT_EQ(f.s.num_preemptions(), 1);
  EXPECT_EQ(f.s.num_swap_outs(), 1);
  EXPECT_EQ(f.kv.num_free_swap_blocks(), 1);
  EXPECT_TRUE(f.s.has_work());

  // B's 3 blocks do not fit beside A's 4, and a newer request that would fit waits
  // behind it.
  f.s.append_token(10);
  f.s.add_group(3, 30, 3, 1);
  EXPECT_EQ(describe(f.s.schedule()), "10:13+1*");
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(3));
  f.s.remove_group(1);
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "20:10+1* 30:0+3*");
  EXPECT_THAT(out.swap_in, ElementsAre(BlockCopy{0, 0}, BlockCopy{1, 1}, BlockCopy{2, 2}));
  EXPECT_THAT(out.seqs[0].block_table, ElementsAre(0, 1, 2));
  EXPECT_THAT(out.sampled_groups, ElementsAre(2, 3));
  EXPECT_THAT(f.s.swapped_groups(), IsEmpty());
  EXPECT_EQ(f.kv.num_free_swap_blocks(), 4);
  f.s.remove_group(2);
  f.s.remove_group(3);
  EXPECT_EQ(f.kv.num_free_blocks(), 6);
}

TEST(Scheduler, RecomputesWhatTheSwapSpaceCannotHold) {
  // Two swap blocks for B's three: B is recomputed.
  Fixture f(6, 4, config(4, 8), 2);
  auto out = run_to_preemption(f);
  EXPECT_THAT(out.preempted_groups, ElementsAre(2));
  EXPECT_THAT(out.swap_out, IsEmpty());
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(2));
  EXPECT_THAT(f.s.swapped_groups(), IsEmpty());
  EXPECT_EQ(f.s.seq_state(20).num_computed, 0);
  EXPECT_EQ(f.s.num_swap_outs(), 0);
  EXPECT_EQ(f.kv.num_free_swap_blocks(), 2);
}

TEST(Scheduler, RecomputesAGroupOfSeveralSequences) {
  Fixture f(6, 4, config(3, 4), 16);
  f.s.add_group(100, 1, 4, 1);
  f.s.add_group(200, 10, 3, 2);
  EXPECT_EQ(describe(f.s.schedule()), "1:0+4*");
  f.s.append_token(1);
  EXPECT_EQ(describe(f.s.schedule()), "1:4+1* 10:0+3*");
  f.s.fork_seq(10, 11);
  for (int i = 0; i < 3; ++i) {
    for (int64_t s : {1, 10, 11}) f.s.append_token(s);
    f.s.schedule();
  }
  for (int64_t s : {1, 10, 11}) f.s.append_token(s);
  auto out = f.s.schedule();
  EXPECT_THAT(out.preempted_groups, ElementsAre(200));
  EXPECT_THAT(out.swap_out, IsEmpty());
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(200));
}

TEST(Scheduler, RemovingASwappedGroupFreesItsSwapBlocks) {
  Fixture f(3, 4, config(4, 8), 4);
  f.s.add_group(1, 10, 4, 1);
  f.s.add_group(2, 20, 4, 1);
  EXPECT_EQ(describe(f.s.schedule()), "10:0+4* 20:0+4*");
  f.s.append_token(10);
  f.s.append_token(20);
  auto out = f.s.schedule();
  EXPECT_THAT(out.preempted_groups, ElementsAre(2));
  EXPECT_THAT(out.swap_out, ElementsAre(BlockCopy{1, 0}));
  EXPECT_EQ(f.kv.num_free_swap_blocks(), 3);
  f.s.remove_group(2);
  EXPECT_EQ(f.kv.num_free_swap_blocks(), 4);
  EXPECT_THAT(f.s.swapped_groups(), IsEmpty());
  f.s.remove_group(1);
  EXPECT_FALSE(f.s.has_work());
}

// Prefix cache: two requests with one prompt, added together. The second waits while
// the first computes the blocks they share, then takes them from the cache; a third,
// added later, takes them at once.
TEST(Scheduler, RequestsArrivingTogetherComputeTheirCommonPrefixOnce) {
  Fixture f(64, 4, config(8, 64));
  f.kv.enable_prefix_cache(0, BlockHashKey{5, 6});
  std::map<int64_t, std::vector<int32_t>> tokens;
  f.s.set_token_source([&](int64_t seq) -> std::span<const int32_t> { return tokens[seq]; });
  for (int32_t i = 0; i < 40; ++i) tokens[10].push_back(100 + i);
  tokens[20] = tokens[10];
  tokens[30] = tokens[10];
  tokens[30].push_back(7);
  f.s.add_group(1, 10, 40, 1, {}, 0);
  f.s.add_group(2, 20, 40, 1, {}, 0);
  // The second takes the nine whole blocks the first computes in this very step (a step
  // writes every token's K/V before attention reads the cache); its last prompt token
  // is computed.
  const auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:0+40* 20:36+4*");
  EXPECT_THAT(out.reused, ElementsAre(std::pair<int64_t, int32_t>{2, 36}));
  EXPECT_TRUE(f.s.waiting_groups().empty());
  const auto& t10 = f.kv.block_table(10);
  const auto& t20 = f.kv.block_table(20);
  for (size_t b = 0; b < 9; ++b) EXPECT_EQ(t20[b], t10[b]);
  EXPECT_NE(t20[9], t10[9]);
  for (int64_t seq : {10, 20}) {
    tokens[seq].push_back(1);
    f.s.append_token(seq);
  }
  EXPECT_EQ(describe(f.s.schedule()), "10:40+1* 20:40+1*");
  f.s.add_group(3, 30, 41, 1, {}, 0);
  // Its first ten blocks are cached (the tenth, tokens 36-39, computed by the first).
  EXPECT_EQ(describe(f.s.schedule()), "30:40+1*");
  EXPECT_EQ(f.s.prefix_queries(), 121);
  EXPECT_EQ(f.s.prefix_hits(), 76);
}

}  // namespace
}  // namespace tachyon

namespace tachyon {
namespace {

// Requests of more LoRA adapters than the model holds at once: those of a new adapter
// wait while max_adapters others run; the base model's and a running adapter's join.
TEST(Scheduler, DistinctAdaptersRunningStayWithinTheLimit) {
  SchedulerConfig c = config(8, 64);
  c.max_adapters = 2;
  Fixture f(64, 4, c);
  f.s.add_group(1, 10, 4, 1, {}, {}, /*adapter=*/7);
  f.s.add_group(2, 20, 4, 1, {}, {}, 8);
  f.s.add_group(3, 30, 4, 1, {}, {}, 9);  // a third adapter: waits
  f.s.add_group(4, 40, 4, 1, {}, {}, 0);  // the head blocks those behind it (FIFO)
  auto out = f.s.schedule();
  EXPECT_EQ(describe(out), "10:0+4* 20:0+4*");
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].adapter, 7);
  EXPECT_EQ(out.seqs[1].adapter, 8);
  EXPECT_THAT(f.s.waiting_groups(), ElementsAre(3, 4));
  // Adapter 7's request ends: adapter 9 may run, and the base model's request with it.
  f.s.remove_group(1);
  f.s.append_token(20);
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "20:4+1* 30:0+4* 40:0+4*");
  EXPECT_EQ(out.seqs[1].adapter, 9);
  EXPECT_EQ(out.seqs[2].adapter, 0);
  // A second request of a running adapter joins at once.
  f.s.add_group(5, 50, 4, 1, {}, {}, 9);
  f.s.append_token(20);
  f.s.append_token(30);
  f.s.append_token(40);
  out = f.s.schedule();
  EXPECT_EQ(describe(out), "20:5+1* 30:4+1* 40:4+1* 50:0+4*");
}

}  // namespace
}  // namespace tachyon
