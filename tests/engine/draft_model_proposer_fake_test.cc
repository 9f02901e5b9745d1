// The draft-model proposer over the fake model (engine/fake_model.h), whose logits are
// a pure function of the token history it reads back through the block tables: the
// paging across many sequences, rejections, chunked steps and evictions; sampled draws
// against the probabilities they report; a failing draft model and one that needs
// prompt layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "engine/draft_model_proposer.h"
#include "engine/fake_model.h"

namespace tachyon {
namespace {

using testing::FakeModel;
using testing::FakeModelOptions;

FakeModelOptions fake_options() {
  FakeModelOptions o;
  o.vocab = 16;
  o.scale = 1.5f;
  o.eos = 2;
  return o;
}

// The fake model's greedy continuation of `tokens`: k tokens, cut after an EOS.
std::vector<int32_t> greedy_reference(std::vector<int32_t> tokens, int32_t k,
                                      const FakeModelOptions& o) {
  std::vector<int32_t> out;
  std::vector<float> row(static_cast<size_t>(o.vocab));
  for (int32_t i = 0; i < k; ++i) {
    FakeModel::reference_logits(tokens, o, row.data());
    const int32_t next =
        static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(next);
    tokens.push_back(next);
    if (next == o.eos) break;
  }
  return out;
}

DraftProposerConfig config(int32_t blocks, int32_t block_size = 4) {
  DraftProposerConfig c;
  c.num_blocks = blocks;
  c.block_size = block_size;
  c.max_batch_tokens = 9;
  c.max_batch_seqs = 5;
  c.eos_token_ids = {2};
  return c;
}

ProposalRequest request(int64_t id, const std::vector<int32_t>& tokens, int32_t prompt_len,
                        int32_t k, const GenerateConfig& cfg) {
  ProposalRequest r;
  r.seq_id = id;
  r.tokens = tokens;
  r.prompt_len = prompt_len;
  r.max_tokens = k;
  r.config = &cfg;
  r.rng =
      RngKey{cfg.random_seed.value_or(0), 0, tokens.size() - static_cast<size_t>(prompt_len), 0};
  return r;
}

// Random rounds over 12 sequences in a cache that holds about 5 of them: each round
// asks for a random subset, keeps a random number of each one's drafts and adds tokens
// of its own; sometimes a sequence ends (released) and a new one takes its place.
TEST(DraftModelProposerFake, PagingAcrossManySequences) {
  const FakeModelOptions o = fake_options();
  auto model = std::make_shared<FakeModel>(o);
  DraftModelProposer p(model, config(30));
  GenerateConfig greedy;
  greedy.temperature = 0.0f;
  std::mt19937 rng(11);
  const int32_t kSeqs = 12;
  std::vector<std::vector<int32_t>> tokens(kSeqs);
  std::vector<int64_t> ids(kSeqs);
  int64_t next_id = 0;
  auto fresh = [&](int32_t s) {
    ids[s] = next_id++;
    tokens[s].clear();
    const int32_t len = 3 + static_cast<int32_t>(rng() % 12);
    for (int32_t i = 0; i < len; ++i) tokens[s].push_back(3 + static_cast<int32_t>(rng() % 13));
  };
  for (int32_t s = 0; s < kSeqs; ++s) fresh(s);
  int64_t drafted = 0, empty = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<int32_t> chosen;
    for (int32_t s = 0; s < kSeqs; ++s)
      if (rng() % 3 == 0) chosen.push_back(s);
    const int32_t k = 1 + static_cast<int32_t>(rng() % 6);
    std::vector<ProposalRequest> reqs;
    for (int32_t s : chosen) reqs.push_back(request(ids[s], tokens[s], 3, k, greedy));
    std::vector<Proposal> out(reqs.size());
    p.propose(reqs, out);
    for (size_t i = 0; i < chosen.size(); ++i) {
      const int32_t s = chosen[i];
      const std::vector<int32_t>& d = out[i].tokens;
      const std::vector<int32_t> want = greedy_reference(tokens[s], k, o);
      // Room may give fewer drafts, never other ones.
      ASSERT_LE(d.size(), want.size());
      ASSERT_TRUE(std::equal(d.begin(), d.end(), want.begin())) << "round " << round;
      drafted += static_cast<int64_t>(d.size());
      empty += d.empty() ? 1 : 0;
      const size_t keep = d.empty() ? 0 : rng() % (d.size() + 1);
      tokens[s].insert(tokens[s].end(), d.begin(), d.begin() + static_cast<ptrdiff_t>(keep));
      const int32_t extra = 1 + static_cast<int32_t>(rng() % 3);
      for (int32_t e = 0; e < extra; ++e) tokens[s].push_back(3 + static_cast<int32_t>(rng() % 13));
      if (tokens[s].size() > 60 || rng() % 10 == 0) {
        p.release(ids[s]);
        fresh(s);
      }
    }
  }
  EXPECT_EQ(model->violations(), 0);
  EXPECT_GT(drafted, 1000);
  EXPECT_LE(model->max_batch_tokens(), 9);
  for (int32_t s = 0; s < kSeqs; ++s) p.release(ids[s]);
  EXPECT_EQ(p.num_free_blocks(), 30);
  EXPECT_EQ(p.num_sequences(), 0);
  (void)empty;
}

// The frequencies of sampled drafts over many keys match the probabilities reported
// with them; tokens reported at probability 0 are never drawn.
void expect_draws_follow_probs(const GenerateConfig& base) {
  const FakeModelOptions o = fake_options();
  DraftModelProposer p(std::make_shared<FakeModel>(o), config(8));
  const std::vector<int32_t> tokens = {5, 9, 4, 7};
  const int32_t kDraws = 20000;
  std::vector<int64_t> counts(static_cast<size_t>(o.vocab), 0);
  std::vector<float> probs;
  for (int32_t i = 0; i < kDraws; ++i) {
    GenerateConfig cfg = base;
    cfg.random_seed = static_cast<uint64_t>(i);
    const ProposalRequest r = request(1, tokens, 4, 1, cfg);
    std::vector<Proposal> out(1);
    p.propose(std::span<const ProposalRequest>(&r, 1), out);
    ASSERT_EQ(out[0].tokens.size(), 1u);
    ASSERT_EQ(out[0].probs.size(), static_cast<size_t>(o.vocab));
    if (probs.empty()) probs = out[0].probs;
    ASSERT_EQ(out[0].probs, probs);  // the distribution does not depend on the key
    ++counts[static_cast<size_t>(out[0].tokens[0])];
  }
  double sum = 0.0;
  for (int32_t v = 0; v < o.vocab; ++v) {
    const double pv = probs[static_cast<size_t>(v)];
    sum += pv;
    const double freq = static_cast<double>(counts[static_cast<size_t>(v)]) / kDraws;
    if (pv == 0.0) {
      EXPECT_EQ(counts[static_cast<size_t>(v)], 0) << "token " << v;
      continue;
    }
    EXPECT_NEAR(freq, pv, 5 * std::sqrt(pv * (1 - pv) / kDraws) + 1e-3) << "token " << v;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(DraftModelProposerFake, SampledDrawsFollowTheirProbabilities) {
  GenerateConfig all;
  all.temperature = 0.9f;
  expect_draws_follow_probs(all);
  GenerateConfig cut = all;
  cut.top_k = 6;
  cut.top_p = 0.8f;
  cut.min_p = 0.1f;
  expect_draws_follow_probs(cut);
}

// A draft model whose forward pass fails gives no drafts for that call and loses the
// call's sequences' state; the engine's step goes on, and later calls work again.
TEST(DraftModelProposerFake, AFailingDraftGivesNoDrafts) {
  FakeModelOptions o = fake_options();
  o.fault_token = 15;
  auto model = std::make_shared<FakeModel>(o);
  DraftModelProposer p(model, config(16));
  GenerateConfig greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> good = {5, 6, 7, 8, 9}, bad = {5, 6, 15, 8};
  std::vector<ProposalRequest> reqs = {request(1, good, 2, 3, greedy),
                                       request(2, bad, 2, 3, greedy)};
  std::vector<Proposal> out(2);
  p.propose(reqs, out);
  EXPECT_TRUE(out[0].tokens.empty());
  EXPECT_TRUE(out[1].tokens.empty());
  EXPECT_EQ(p.num_free_blocks(), 16);
  const ProposalRequest again = request(1, good, 2, 3, greedy);
  std::vector<Proposal> one(1);
  p.propose(std::span<const ProposalRequest>(&again, 1), one);
  EXPECT_EQ(one[0].tokens, greedy_reference(good, 3, o));
}

// A draft whose prompts carry a layout (a bidirectional context) is not batched here:
// no drafts, no error.
TEST(DraftModelProposerFake, NoDraftsFromAModelThatNeedsLayouts) {
  FakeModelOptions o = fake_options();
  o.layout_token = 4;
  DraftModelProposer p(std::make_shared<FakeModel>(o), config(16));
  GenerateConfig greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> t = {5, 4, 7, 8};
  const ProposalRequest r = request(1, t, 3, 3, greedy);
  std::vector<Proposal> out(1);
  p.propose(std::span<const ProposalRequest>(&r, 1), out);
  EXPECT_TRUE(out[0].tokens.empty());
  EXPECT_EQ(p.num_free_blocks(), 16);
}

}  // namespace
}  // namespace tachyon
