#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

Scheduler::Scheduler(SchedulerConfig config, KVCacheManager* kv) : config_(config), kv_(kv) {
  TACHYON_CHECK_GT(config_.max_num_seqs, 0);
  TACHYON_CHECK_GT(config_.max_num_batched_tokens, 0);
  TACHYON_CHECK_GE(config_.reserve_blocks, 0);
}

Scheduler::Group& Scheduler::group(int64_t id) {
  auto it = groups_.find(id);
  TACHYON_CHECK(it != groups_.end(), "unknown request {}", id);
  return it->second;
}

const Scheduler::SeqState& Scheduler::seq_state(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  TACHYON_CHECK(it != seqs_.end(), "unknown sequence {}", seq_id);
  return it->second;
}

const std::vector<int64_t>& Scheduler::group_seqs(int64_t group_id) const {
  auto it = groups_.find(group_id);
  TACHYON_CHECK(it != groups_.end(), "unknown request {}", group_id);
  return it->second.seqs;
}

std::vector<int64_t> Scheduler::waiting_groups() const {
  std::vector<int64_t> out;
  for (const auto& k : waiting_) out.push_back(k.second);
  return out;
}

std::vector<int64_t> Scheduler::swapped_groups() const {
  std::vector<int64_t> out;
  for (const auto& k : swapped_) out.push_back(k.second);
  return out;
}

std::vector<int64_t> Scheduler::running_groups() const {
  std::vector<int64_t> out;
  for (const auto& k : running_) out.push_back(k.second);
  return out;
}

void Scheduler::add_group(int64_t group_id, int64_t seq_id, int32_t num_prompt_tokens,
                          int32_t max_width, const PromptLayout& layout,
                          std::optional<uint64_t> cache_salt, int32_t adapter) {
  TACHYON_CHECK(!groups_.count(group_id), "request {} added twice", group_id);
  TACHYON_CHECK(!seqs_.count(seq_id), "sequence {} added twice", seq_id);
  TACHYON_CHECK_GT(num_prompt_tokens, 0);
  TACHYON_CHECK(max_width >= 1 && max_width <= config_.max_num_seqs, "width {} outside [1, {}]",
                max_width, config_.max_num_seqs);
  TACHYON_CHECK(layout.atomic_len() >= 0 && layout.atomic_len() < num_prompt_tokens &&
                    layout.atomic_len() <= config_.max_num_batched_tokens,
                "request {}: a bidirectional context of {} tokens (prompt {}, {} tokens per step)",
                group_id, layout.atomic_len(), num_prompt_tokens, config_.max_num_batched_tokens);
  Group g;
  g.id = group_id;
  g.arrival = next_arrival_++;
  g.max_width = max_width;
  TACHYON_CHECK(adapter == 0 || config_.max_adapters > 0,
                "request {}: adapter {} without room for adapters", group_id, adapter);
  g.adapter = adapter;
  if (kv_->prefix_caching()) {
    TACHYON_CHECK(tokens_ != nullptr, "a prefix cache without a token source");
    g.cache_salt = cache_salt;
  }
  g.seqs = {seq_id};
  waiting_.insert({g.arrival, group_id});
  groups_.emplace(group_id, std::move(g));
  seqs_[seq_id] = SeqState{group_id, num_prompt_tokens, 0, num_prompt_tokens, layout};
}

void Scheduler::fork_seq(int64_t parent, int64_t child) {
  TACHYON_CHECK(!seqs_.count(child), "sequence {} added twice", child);
  const SeqState p = seq_state(parent);
  // No width check: a beam step forks the new beams before it drops the old ones.
  Group& g = group(p.group_id);
  g.seqs.push_back(child);
  seqs_[child] = p;
  kv_->fork(parent, child);
}

void Scheduler::append_token(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  TACHYON_CHECK(it != seqs_.end(), "unknown sequence {}", seq_id);
  ++it->second.num_tokens;
}

bool Scheduler::can_speculate(int64_t group_id) const {
  auto it = groups_.find(group_id);
  if (it == groups_.end() || !it->second.running || it->second.seqs.empty()) return false;
  for (int64_t s : it->second.seqs) {
    const SeqState& st = seqs_.at(s);
    if (st.drafts != 0 || st.num_tokens - st.num_computed != 1) return false;
  }
  return true;
}

void Scheduler::add_drafts(int64_t seq_id, int32_t n) {
  SeqState& st = seqs_.at(seq_id);
  TACHYON_CHECK(n > 0 && st.drafts == 0 && st.num_tokens - st.num_computed == 1,
                "sequence {}: {} drafts where {} of {} tokens are computed", seq_id, n,
                st.num_computed, st.num_tokens);
  st.num_tokens += n;
  st.drafts = n;
  drafted_.insert(seq_id);
}

void Scheduler::drop_drafts(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  it->second.num_tokens -= it->second.drafts;
  it->second.drafts = 0;
}

void Scheduler::accept_drafts(int64_t seq_id, int32_t accepted) {
  SeqState& st = seqs_.at(seq_id);
  TACHYON_CHECK(accepted >= 0 && accepted <= st.drafts && st.num_computed == st.num_tokens,
                "sequence {}: {} of {} drafts accepted ({} of {} tokens computed)", seq_id,
                accepted, st.drafts, st.num_computed, st.num_tokens);
  st.num_tokens -= st.drafts;
  st.drafts = 0;
  st.num_computed = st.num_tokens + accepted;
  drafted_.erase(seq_id);
  // The next step writes the token after the kept drafts: blocks past it go.
  kv_->truncate(seq_id, st.num_computed + 1);
}

void Scheduler::remove_seq(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  drafted_.erase(seq_id);
  Group& g = group(it->second.group_id);
  g.seqs.erase(std::find(g.seqs.begin(), g.seqs.end(), seq_id));
  publish(g, seq_id);
  kv_->free(seq_id);
  kv_->forget(seq_id);
  seqs_.erase(it);
}

int32_t Scheduler::pin_seq(int64_t seq_id) {
  const SeqState& st = seq_state(seq_id);
  const Group& g = group(st.group_id);
  if (!g.cache_salt) return 0;
  publish(g, seq_id);
  return kv_->pin(seq_id) * kv_->block_size();
}

void Scheduler::publish(const Group& g, int64_t seq_id) {
  if (!g.cache_salt) return;
  SeqState& st = seqs_.at(seq_id);
  const int32_t full = st.num_computed / kv_->block_size();
  if (full <= st.published_blocks) return;
  if (static_cast<int32_t>(kv_->block_hashes(seq_id).size()) < full)
    kv_->hash_tokens(seq_id, tokens_(seq_id), *g.cache_salt);
  kv_->publish(seq_id, st.num_computed);
  // Blocks of tokens the host does not know yet are offered again in a later step.
  st.published_blocks = std::min(full, static_cast<int32_t>(kv_->block_hashes(seq_id).size()));
}

int32_t Scheduler::take_cached_prefix(Group& g) {
  if (!g.cache_salt || g.seqs.size() != 1) return 0;
  const int64_t s = g.seqs[0];
  SeqState& st = seqs_.at(s);
  if (st.num_computed != 0 || kv_->has(s)) return 0;
  kv_->hash_tokens(s, tokens_(s), *g.cache_salt);
  // Short of the last token: its logits are wanted, so it is computed.
  const int32_t blocks = kv_->match_prefix(s, (st.num_tokens - 1) / kv_->block_size());
  st.num_computed = blocks * kv_->block_size();
  st.published_blocks = blocks;
  return st.num_computed;
}

void Scheduler::drop_cached_prefix(Group& g) {
  const int64_t s = g.seqs[0];
  kv_->free(s);  // the blocks go back to the cache
  SeqState& st = seqs_.at(s);
  st.num_computed = 0;
  st.published_blocks = 0;
}

void Scheduler::remove_group(int64_t group_id) {
  auto it = groups_.find(group_id);
  if (it == groups_.end()) return;
  Group& g = it->second;
  for (int64_t s : g.seqs) {
    publish(g, s);
    kv_->free(s);
    kv_->forget(s);
    seqs_.erase(s);
    drafted_.erase(s);
  }
  if (g.running) {
    running_.erase({g.arrival, g.id});
    running_width_ -= g.max_width;
    count_running(g, -1);
  } else if (g.swapped) {
    swapped_.erase({g.arrival, g.id});
  } else {
    waiting_.erase({g.arrival, g.id});
  }
  groups_.erase(it);
}

bool Scheduler::is_decoding(const Group& g) const {
  for (int64_t s : g.seqs) {
    const SeqState& st = seqs_.at(s);
    if (st.num_tokens - st.num_computed != 1 + st.drafts) return false;
  }
  return true;
}

Scheduler::Plan Scheduler::plan_verify(const Group& g, int32_t token_budget, int32_t free_blocks,
                                       int32_t draft_reserve) const {
  Plan plan;
  const size_t n = g.seqs.size();
  plan.take.assign(n, 0);
  plan.drafts.assign(n, 0);
  // Drafts are dropped rather than the group stalled: one token each first, then the
  // drafts the budget leaves room for, in order.
  if (token_budget < static_cast<int32_t>(n)) return plan;  // kNoBudget: a decode does not split
  int32_t extra = std::max(0, token_budget - draft_reserve - static_cast<int32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    plan.drafts[i] = std::min(seqs_.at(g.seqs[i]).drafts, extra);
    extra -= plan.drafts[i];
  }
  auto need = [&] {
    int64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      const SeqState& st = seqs_.at(g.seqs[i]);
      total += kv_->blocks_needed(g.seqs[i], st.num_computed, st.num_computed + 1 + plan.drafts[i]);
    }
    return total;
  };
  // Short of blocks: fewer drafts, the last sequence's first.
  for (size_t i = n; i > 0 && need() > free_blocks;) {
    if (plan.drafts[i - 1] > 0)
      --plan.drafts[i - 1];
    else
      --i;
  }
  if (need() > free_blocks) {
    plan.status = Plan::kNoMemory;
    return plan;
  }
  for (size_t i = 0; i < n; ++i) plan.take[i] = 1 + plan.drafts[i];
  plan.sample = true;
  plan.status = Plan::kOk;
  return plan;
}

Scheduler::Plan Scheduler::plan_group(const Group& g, int32_t token_budget, int32_t free_blocks,
                                      int32_t draft_reserve) const {
  Plan plan;
  const size_t n = g.seqs.size();
  plan.take.assign(n, 0);
  if (n == 0 || token_budget <= 0) return plan;  // kNoBudget
  for (int64_t s : g.seqs)
    if (seqs_.at(s).drafts > 0) return plan_verify(g, token_budget, free_blocks, draft_reserve);
  int64_t total = 0;
  bool all_single = true;
  for (int64_t s : g.seqs) {
    const SeqState& st = seqs_.at(s);
    const int32_t rem = st.num_tokens - st.num_computed;
    TACHYON_CHECK_GE(rem, 0);
    total += rem;
    all_single = all_single && rem == 1;
  }
  if (total == 0) {
    plan.status = Plan::kIdle;
    return plan;
  }
  // Everything left fits: the group catches up and samples.
  if (total <= token_budget) {
    int64_t need = 0;
    for (int64_t s : g.seqs) {
      const SeqState& st = seqs_.at(s);
      need += kv_->blocks_needed(s, st.num_computed, st.num_tokens);
    }
    if (need <= free_blocks) {
      for (size_t i = 0; i < n; ++i) {
        const SeqState& st = seqs_.at(g.seqs[i]);
        plan.take[i] = st.num_tokens - st.num_computed;
      }
      plan.sample = true;
      plan.status = Plan::kOk;
      return plan;
    }
    if (all_single) {
      plan.status = Plan::kNoMemory;
      return plan;
    }
  } else if (all_single) {
    return plan;  // a lockstep decode does not split: kNoBudget
  }
  // A chunk: every sequence stops short of its last token, which is computed in the
  // step where the whole group catches up (and samples).
  int32_t budget = token_budget;
  int32_t free_left = free_blocks;
  int32_t planned = 0;
  bool budget_short = false;  // a bidirectional context does not fit the budget left
  for (size_t i = 0; i < n && budget > 0; ++i) {
    const SeqState& st = seqs_.at(g.seqs[i]);
    // Tokens that attend to one another both ways are computed together, or not yet.
    const int32_t atomic = st.layout.atomic_len();
    int32_t take = std::min(st.num_tokens - st.num_computed - 1, budget);
    if (st.num_computed + take < atomic) {
      budget_short = true;
      continue;
    }
    take = std::min(take, kv_->max_writable(g.seqs[i], st.num_computed, free_left));
    if (st.num_computed + take < atomic) take = 0;
    if (take <= 0) continue;
    free_left -= kv_->blocks_needed(g.seqs[i], st.num_computed, st.num_computed + take);
    budget -= take;
    planned += take;
    plan.take[i] = take;
  }
  plan.status = planned > 0 ? Plan::kOk : budget_short ? Plan::kNoBudget : Plan::kNoMemory;
  return plan;
}

void Scheduler::apply_plan(Group& g, const Plan& plan, SchedulerOutput* out) {
  for (size_t i = 0; i < g.seqs.size(); ++i) {
    if (plan.take[i] == 0) continue;
    const int64_t s = g.seqs[i];
    SeqState& st = seqs_.at(s);
    int32_t drafts = 0;
    if (!plan.drafts.empty()) {
      drafts = plan.drafts[i];
      st.num_tokens -= st.drafts - drafts;  // those the step has no room for
      st.drafts = drafts;
    }
    const bool ok =
        kv_->prepare_write(s, st.num_computed, st.num_computed + plan.take[i], &out->copies);
    TACHYON_CHECK(ok, "planned blocks for sequence {} were not available", s);
    ScheduledSeq ss;
    ss.seq_id = s;
    ss.group_id = g.id;
    ss.start = st.num_computed;
    ss.num_tokens = plan.take[i];
    ss.num_logits = plan.sample ? 1 + drafts : 0;
    ss.block_table = kv_->block_table(s);
    ss.prompt_len = st.prompt_len;
    ss.layout = st.layout;
    ss.adapter = g.adapter;
    st.num_computed += plan.take[i];
    // The blocks this chunk completes serve the admissions after it in this very step:
    // a step writes every token's K/V before any attention reads the cache.
    if (kv_->prefix_caching()) publish(g, s);
    out->num_batched_tokens += plan.take[i];
    out->seqs.push_back(std::move(ss));
  }
  if (plan.sample) out->sampled_groups.push_back(g.id);
}

void Scheduler::preempt(Group& g, SchedulerOutput* out) {
  TACHYON_CHECK(g.running);
  running_.erase({g.arrival, g.id});
  running_width_ -= g.max_width;
  count_running(g, -1);
  g.running = false;
  out->preempted_groups.push_back(g.id);
  ++num_preemptions_;
  for (int64_t s : g.seqs) drop_drafts(s);
  for (int64_t s : g.seqs) {
    publish(g, s);
    seqs_.at(s).published_blocks = 0;  // its blocks go: those it gets later are offered anew
  }
  // Swapped out, it keeps what it computed; the group was not scheduled in this step
  // (the victim is the newest running group, and groups are planned oldest first).
  if (g.seqs.size() == 1 && kv_->swap_out(g.seqs[0], &out->swap_out)) {
    g.swapped = true;
    swapped_.insert({g.arrival, g.id});
    ++num_swap_outs_;
    return;
  }
  for (int64_t s : g.seqs) {
    kv_->free(s);
    seqs_.at(s).num_computed = 0;
  }
  waiting_.insert({g.arrival, g.id});
}

bool Scheduler::grow_chunk(SchedulerOutput* out) {
  const int32_t n = kv_->num_blocks();
  if (config_.grow_blocks <= 0 || n >= config_.max_blocks) return false;
  const int32_t to =
      static_cast<int32_t>(std::min<int64_t>(config_.max_blocks, int64_t{n} + config_.grow_blocks));
  kv_->grow(to);
  out->kv_blocks = to;
  ++num_kv_grows_;
  return true;
}

bool Scheduler::grow_until_free(int64_t want, SchedulerOutput* out) {
  // Counting only blocks that hold nothing cached: the pool grows before it evicts.
  while (kv_->num_free_uncached() < want)
    if (!grow_chunk(out)) return false;
  return true;
}

void Scheduler::schedule_running(SchedulerOutput* out, int32_t* token_budget) {
  const std::vector<int64_t> order = running_groups();
  // Tokens the decoding groups will take; a prefill chunk may only use what they leave.
  int32_t decode_pending = 0;
  for (int64_t id : order) {
    const Group& g = groups_.at(id);
    if (is_decoding(g)) decode_pending += static_cast<int32_t>(g.seqs.size());
  }
  for (int64_t id : order) {
    auto it = groups_.find(id);
    if (it == groups_.end() || !it->second.running) continue;  // preempted in this step
    Group& g = it->second;
    if (g.seqs.empty()) continue;
    const bool decoding = is_decoding(g);
    if (decoding) decode_pending -= static_cast<int32_t>(g.seqs.size());
    const int32_t budget = decoding ? *token_budget : *token_budget - decode_pending;
    // The blocks its tokens of this step need: grown into while below the limit.
    int64_t want = 0;
    for (int64_t s : g.seqs) {
      const SeqState& st = seqs_.at(s);
      want += kv_->blocks_needed(s, st.num_computed,
                                 std::min(st.num_tokens, st.num_computed + std::max(budget, 0)));
    }
    if (want > kv_->num_free_uncached()) grow_until_free(want, out);
    while (true) {
      // Drafts, like prefill chunks, take only what the decodes after them leave.
      const Plan plan = plan_group(g, budget, kv_->num_free_blocks(), decode_pending);
      if (plan.status == Plan::kOk) {
        apply_plan(g, plan, out);
        for (int32_t t : plan.take) *token_budget -= t;
        break;
      }
      if (plan.status == Plan::kNoBudget || plan.status == Plan::kIdle) break;
      // Out of blocks: grow the cache while below its limit, else preempt the most recent running
      // group (perhaps this one).
      if (grow_chunk(out)) continue;
      Group& victim = groups_.at(std::prev(running_.end())->second);
      preempt(victim, out);
      if (&victim == &g) break;
    }
  }
}

void Scheduler::start_group(Group& g, const Plan& plan, SchedulerOutput* out,
                            int32_t* token_budget) {
  running_.insert({g.arrival, g.id});
  running_width_ += g.max_width;
  count_running(g, +1);
  g.running = true;
  if (plan.status != Plan::kOk) return;
  apply_plan(g, plan, out);
  for (int32_t t : plan.take) *token_budget -= t;
}

bool Scheduler::swap_in_groups(SchedulerOutput* out, int32_t* token_budget) {
  while (!swapped_.empty()) {
    Group& g = groups_.at(swapped_.begin()->second);
    if (running_width_ + g.max_width > config_.max_num_seqs || !adapter_fits(g)) return false;
    // Its blocks, the ones its next tokens need, and the admissions' reserve.
    const int64_t s = g.seqs[0];
    const SeqState& st = seqs_.at(s);
    const int64_t have = kv_->swapped_blocks(s);
    const int64_t next = (int64_t{st.num_tokens} + kv_->block_size() - 1) / kv_->block_size();
    const int32_t reserve = running_.empty() ? 0 : config_.reserve_blocks;
    const int64_t want = std::max(have, next) + reserve;
    grow_until_free(want, out);
    if (want > kv_->num_free_blocks()) return false;
    const bool ok = kv_->swap_in(s, &out->swap_in);
    TACHYON_CHECK(ok, "cache blocks for sequence {} were not available", s);
    swapped_.erase(swapped_.begin());
    g.swapped = false;
    start_group(g, plan_group(g, *token_budget, kv_->num_free_blocks()), out, token_budget);
  }
  return true;
}

void Scheduler::admit_waiting(SchedulerOutput* out, int32_t* token_budget) {
  while (!waiting_.empty() && *token_budget > 0) {
    Group& g = groups_.at(waiting_.begin()->second);
    if (running_width_ + g.max_width > config_.max_num_seqs || !adapter_fits(g)) break;
    const int32_t reused = take_cached_prefix(g);
    // Admitted only if its whole current length fits beside the reserve (waived when
    // nothing runs, so that a request that fits the cache alone always starts).
    Plan plan;  // kNoBudget: it waits
    int64_t need = 0;
    for (int64_t s : g.seqs) {
      const SeqState& st = seqs_.at(s);
      need += kv_->blocks_needed(s, st.num_computed, st.num_tokens);
    }
    const int32_t reserve = running_.empty() ? 0 : config_.reserve_blocks;
    grow_until_free(need + reserve, out);
    if (need + reserve <= kv_->num_free_blocks())
      plan = plan_group(g, *token_budget, kv_->num_free_blocks());
    if (plan.status != Plan::kOk) {
      if (reused > 0) drop_cached_prefix(g);  // it waits as it came
      break;
    }
    if (g.cache_salt) {
      prefix_queries_ += seqs_.at(g.seqs[0]).num_tokens;
      prefix_hits_ += reused;
      if (reused > 0) out->reused.emplace_back(g.id, reused);
    }
    waiting_.erase(waiting_.begin());
    start_group(g, plan, out, token_budget);
  }
}

bool Scheduler::adapter_fits(const Group& g) const {
  return g.adapter == 0 || running_adapters_.count(g.adapter) > 0 ||
         static_cast<int32_t>(running_adapters_.size()) < config_.max_adapters;
}

void Scheduler::count_running(const Group& g, int32_t delta) {
  if (g.adapter == 0) return;
  int32_t& n = running_adapters_[g.adapter];
  n += delta;
  if (n == 0) running_adapters_.erase(g.adapter);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t token_budget = config_.max_num_batched_tokens;
  // The blocks computed by the steps before this one become shareable.
  if (kv_->prefix_caching())
    for (const auto& key : running_) {
      const Group& g = groups_.at(key.second);
      for (int64_t s : g.seqs) publish(g, s);
    }
  schedule_running(&out, &token_budget);
  // A group preempted in this step waits at least one step, so that the blocks it gave
  // up go to the groups that needed them; swapped-out groups, older than any waiting
  // one, come back first.
  if (out.preempted_groups.empty() && swap_in_groups(&out, &token_budget))
    admit_waiting(&out, &token_budget);
  kv_->take_moves(&out.swap_out, &out.swap_in);
  // Drafts of sequences this step does not verify leave them.
  std::set<int64_t> verifying;
  for (const ScheduledSeq& ss : out.seqs)
    if (ss.num_logits > 1) verifying.insert(ss.seq_id);
  for (int64_t s : drafted_)
    if (!verifying.count(s)) drop_drafts(s);
  drafted_ = std::move(verifying);
  return out;
}

}  // namespace tachyon
