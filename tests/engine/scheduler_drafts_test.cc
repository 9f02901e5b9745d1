// The scheduler's side of speculative decoding: draft tokens are computed with the last
// token when the budget and the blocks allow, dropped (not stalled on) when they do not,
// dropped by groups that are not scheduled or are preempted, and rolled back after the
// step with the blocks past the kept tokens.
#include <gtest/gtest.h>

#include "engine/scheduler.h"

namespace tachyon {
namespace {

SchedulerConfig config(int32_t seqs, int32_t tokens) {
  SchedulerConfig c;
  c.max_num_seqs = seqs;
  c.max_num_batched_tokens = tokens;
  return c;
}

// Runs the prompts of groups of one sequence each (group g, sequence 10 g) in one step
// and takes their first tokens.
void start(Scheduler& s, const std::vector<std::pair<int64_t, int32_t>>& groups) {
  for (const auto& [g, prompt] : groups) s.add_group(g, 10 * g, prompt, 1);
  const SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.sampled_groups.size(), groups.size());
  for (const auto& [g, prompt] : groups) s.append_token(10 * g);
}

TEST(SchedulerDrafts, ComputedWithTheLastTokenAndRolledBack) {
  KVCacheManager kv(16, 4, 0);
  Scheduler s(config(4, 64), &kv);
  start(s, {{1, 6}});  // 7 tokens, 6 computed
  ASSERT_TRUE(s.can_speculate(1));
  s.add_drafts(10, 4);
  EXPECT_FALSE(s.can_speculate(1));
  auto out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].start, 6);
  EXPECT_EQ(out.seqs[0].num_tokens, 5);
  EXPECT_EQ(out.seqs[0].num_logits, 5);
  EXPECT_EQ(kv.block_table(10).size(), 3u);  // 11 positions
  EXPECT_EQ(s.seq_state(10).drafts, 4);
  // One draft accepted: 8 tokens computed, the 9th (the target's) comes next.
  s.accept_drafts(10, 1);
  s.append_token(10);
  s.append_token(10);
  EXPECT_EQ(s.seq_state(10).num_tokens, 9);
  EXPECT_EQ(s.seq_state(10).num_computed, 8);
  EXPECT_EQ(s.seq_state(10).drafts, 0);
  EXPECT_EQ(kv.block_table(10).size(), 3u);  // the 9th token's block stays
  EXPECT_TRUE(s.can_speculate(1));
  s.add_drafts(10, 3);
  out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].num_logits, 4);
  s.accept_drafts(10, 0);  // none: the 9 known tokens computed, the target's 10th next
  s.append_token(10);
  EXPECT_EQ(s.seq_state(10).num_computed, 9);
  EXPECT_EQ(s.seq_state(10).num_tokens, 10);
  EXPECT_EQ(kv.block_table(10).size(), 3u);
  EXPECT_EQ(kv.num_free_blocks(), 13);
  // Drafts into a fourth block, all rejected: that block goes back.
  s.add_drafts(10, 4);
  out = s.schedule();
  EXPECT_EQ(kv.block_table(10).size(), 4u);
  s.accept_drafts(10, 0);
  EXPECT_EQ(kv.block_table(10).size(), 3u);
  EXPECT_EQ(kv.num_free_blocks(), 13);
}

TEST(SchedulerDrafts, DroppedRatherThanStalledWhenTheBudgetIsShort) {
  KVCacheManager kv(32, 4, 0);
  Scheduler s(config(4, 8), &kv);
  start(s, {{1, 3}, {2, 3}});
  s.add_drafts(10, 5);
  s.add_drafts(20, 5);
  // Budget 8: the older group's decode and its 5 drafts (of the 6 the younger group's
  // decode leaves), then the younger's decode and the 1 draft left.
  const auto out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].num_tokens, 6);
  EXPECT_EQ(out.seqs[1].num_tokens, 2);
  EXPECT_EQ(out.num_batched_tokens, 8);
  EXPECT_EQ(s.seq_state(10).drafts, 5);
  EXPECT_EQ(s.seq_state(20).drafts, 1);
  EXPECT_EQ(s.seq_state(20).num_tokens, 5);
}

TEST(SchedulerDrafts, DroppedWhenTheBlocksAreShort) {
  KVCacheManager kv(3, 4, 0);  // 12 slots
  Scheduler s(config(4, 64), &kv);
  start(s, {{1, 6}});  // 7 tokens: 2 blocks
  s.add_drafts(10, 8);
  const auto out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].num_logits, 6);  // positions 6..11: the 5 drafts that fit
  EXPECT_EQ(s.seq_state(10).drafts, 5);
  EXPECT_TRUE(out.preempted_groups.empty());
}

TEST(SchedulerDrafts, APreemptedGroupDropsItsDrafts) {
  KVCacheManager kv(4, 4, 0);  // 16 slots
  Scheduler s(config(4, 64), &kv);
  start(s, {{1, 8}, {2, 8}});  // 9 tokens each, 8 computed: 2 full blocks each
  s.add_drafts(10, 4);
  s.add_drafts(20, 4);
  // Group 1's next token needs a third block, with none free: the newest group (2) is
  // preempted (its drafts dropped), and group 1 takes its drafts' blocks.
  const auto out = s.schedule();
  ASSERT_EQ(out.preempted_groups, std::vector<int64_t>{2});
  EXPECT_EQ(s.seq_state(20).drafts, 0);
  EXPECT_EQ(s.seq_state(20).num_tokens, 9);
  EXPECT_EQ(s.seq_state(20).num_computed, 0);
  EXPECT_EQ(s.seq_state(10).drafts, 4);
}

}  // namespace
}  // namespace tachyon
