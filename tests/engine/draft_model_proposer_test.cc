// The draft-model proposer on the bundled draft model (models/tiny-kjv-draft, unpacked into the build tree, f32 on
// the CPU): its greedy proposals against the draft's own greedy continuation computed
// one sequence at a time through the model runner (itself checked against
// transformers' greedy generations in tests/engine/data/kjv_reference.json), the
// catch-up after rejected drafts, its block accounting, sampled proposals and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "engine/draft_model_proposer.h"
#include "model/loader.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;

std::shared_ptr<Model> load_draft() {
  LoadOptions opts;
  opts.dtype = DType::kF32;
  opts.device = parse_device("cpu");
  return load_model(std::string(TACHYON_BINARY_DIR) + "/models/tiny-kjv-draft", opts);
}

struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> transformers;  // the draft's greedy continuation, up to EOS
};

std::vector<Prompt> reference_prompts() {
  const Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  std::vector<Prompt> out;
  for (const Json& c : ref["models"]["tiny-kjv-draft"])
    out.push_back({c["prompt"].get<std::string>(), c["prompt_ids"].get<std::vector<int32_t>>(),
                   c["greedy"][0].get<std::vector<int32_t>>()});
  return out;
}

// The draft alone, one sequence at a time: its greedy continuation of `tokens` (m
// tokens, through EOS and past it), computed from scratch in a cache of its own.
class Reference {
 public:
  Reference() : model_(load_draft()) { model_->init_kv_cache(kBlocks, kBlock); }

  // With `cfg`, the logits go through its processors first (the sequence's prompt is
  // its first prompt_len tokens).
  std::vector<int32_t> greedy(std::vector<int32_t> tokens, int32_t m,
                              const GenerateConfig* cfg = nullptr, int32_t prompt_len = 0) {
    std::vector<int32_t> out;
    int32_t computed = 0;
    const int32_t vocab = model_->vocab_size();
    for (int32_t i = 0; i < m; ++i) {
      ForwardBatch b;
      const int32_t n = static_cast<int32_t>(tokens.size()) - computed;
      for (int32_t t = computed; t < computed + n; ++t) {
        b.token_ids.push_back(tokens[static_cast<size_t>(t)]);
        b.positions.push_back(t);
      }
      b.query_start = {0, n};
      b.context_lens = {computed + n};
      b.max_blocks_per_seq = kBlocks;
      for (int32_t k = 0; k < kBlocks; ++k) b.block_tables.push_back(k);
      b.logits_rows = {n - 1};
      const Tensor logits = model_->forward(b);
      computed += n;
      std::vector<float> row(logits.data<float>(), logits.data<float>() + vocab);
      if (cfg != nullptr) {
        SamplingContext ctx;
        ctx.config = cfg;
        ctx.tokens = tokens;
        ctx.prompt_len = prompt_len;
        process_logits(row.data(), vocab, ctx);
      }
      const int32_t next =
          static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      out.push_back(next);
      tokens.push_back(next);
    }
    return out;
  }

 private:
  static constexpr int32_t kBlock = 16, kBlocks = 8;
  std::shared_ptr<Model> model_;
};

constexpr int32_t kEos = 2;

// What a greedy proposal of k tokens should be: the continuation, cut after an EOS.
std::vector<int32_t> expected_drafts(Reference& ref, const std::vector<int32_t>& tokens,
                                     int32_t k) {
  std::vector<int32_t> g = ref.greedy(tokens, k);
  const auto eos = std::find(g.begin(), g.end(), kEos);
  if (eos != g.end()) g.erase(eos + 1, g.end());
  return g;
}

GenerateConfig greedy_config() {
  GenerateConfig c;
  c.temperature = 0.0f;
  return c;
}

GenerateConfig sampled_config() {
  GenerateConfig c;
  c.temperature = 0.8f;
  c.top_k = 40;
  c.top_p = 0.9f;
  c.random_seed = 7;
  return c;
}

DraftProposerConfig proposer_config(int32_t blocks) {
  DraftProposerConfig c;
  c.num_blocks = blocks;
  c.block_size = 16;
  c.eos_token_ids = {kEos};
  return c;
}

// One call over several sequences; requests' spans point into `tokens`.
std::vector<Proposal> propose(DraftModelProposer& p,
                              const std::vector<std::vector<int32_t>>& tokens,
                              const std::vector<int32_t>& prompt_lens, int32_t k,
                              const GenerateConfig& cfg, int64_t first_id = 0) {
  std::vector<ProposalRequest> reqs(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    reqs[i].seq_id = first_id + static_cast<int64_t>(i);
    reqs[i].tokens = tokens[i];
    reqs[i].prompt_len = prompt_lens[i];
    reqs[i].max_tokens = k;
    reqs[i].config = &cfg;
    reqs[i].rng = RngKey{cfg.random_seed.value_or(0), 0,
                         tokens[i].size() - static_cast<size_t>(prompt_lens[i]), 0};
  }
  std::vector<Proposal> out(tokens.size());
  p.propose(reqs, out);
  return out;
}

TEST(DraftModelProposer, ReferenceLoopMatchesTransformers) {
  Reference ref;
  for (const Prompt& p : reference_prompts()) {
    const std::vector<int32_t> want = p.transformers;
    std::vector<int32_t> got = ref.greedy(p.ids, static_cast<int32_t>(want.size()));
    EXPECT_EQ(got, want) << p.text;
  }
}

TEST(DraftModelProposer, GreedyProposalsAreTheDraftsContinuation) {
  Reference ref;
  const std::vector<Prompt> prompts = reference_prompts();
  ASSERT_EQ(prompts.size(), 7u);
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> lens;
  for (const Prompt& p : prompts) {
    tokens.push_back(p.ids);
    lens.push_back(static_cast<int32_t>(p.ids.size()));
  }
  const GenerateConfig cfg = greedy_config();
  for (int32_t k : {1, 4, 8}) {
    DraftModelProposer p(load_draft(), proposer_config(64));
    EXPECT_EQ(p.name(), "draft_model");
    const std::vector<Proposal> out = propose(p, tokens, lens, k, cfg);
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(out[i].tokens, expected_drafts(ref, tokens[i], k)) << prompts[i].text << " k=" << k;
      EXPECT_TRUE(out[i].probs.empty());
    }
  }
}

// The request's logits processors apply to the draft's logits, each draft position
// seeing the drafts before it (a repetition penalty, a bias that bans the draft's
// favourite next token).
TEST(DraftModelProposer, GreedyProposalsFollowTheRequestsProcessors) {
  Reference ref;
  const std::vector<Prompt> prompts = reference_prompts();
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> lens;
  for (const Prompt& p : prompts) {
    tokens.push_back(p.ids);
    lens.push_back(static_cast<int32_t>(p.ids.size()));
  }
  GenerateConfig cfg = greedy_config();
  cfg.repetition_penalty = 1.5f;
  cfg.logit_bias = {{272, -100.0f}};  // " the"
  DraftModelProposer p(load_draft(), proposer_config(64));
  const std::vector<Proposal> out = propose(p, tokens, lens, 8, cfg);
  int differs = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<int32_t> want = ref.greedy(tokens[i], 8, &cfg, lens[i]);
    const auto eos = std::find(want.begin(), want.end(), kEos);
    if (eos != want.end()) want.erase(eos + 1, want.end());
    EXPECT_EQ(out[i].tokens, want) << prompts[i].text;
    EXPECT_EQ(std::count(out[i].tokens.begin(), out[i].tokens.end(), 272), 0);
    differs += out[i].tokens != expected_drafts(ref, tokens[i], 8) ? 1 : 0;
  }
  EXPECT_GE(differs, 3);  // the processors changed them
}

// Rounds of verification simulated on the host: the "target" keeps the first j drafts
// of each sequence (j differs by sequence and round) and adds a token of its own, some
// equal to the next draft (everything accepted plus a bonus token), most not (a
// rejection), some a second one. Each round's proposals must again be the draft's greedy
// continuation of the new tokens, with steps small enough that the catch-up is chunked and batched.
TEST(DraftModelProposer, CatchesUpAfterRejections) {
  Reference ref;
  const std::vector<Prompt> prompts = reference_prompts();
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> lens;
  for (const Prompt& p : prompts) {
    tokens.push_back(p.ids);
    lens.push_back(static_cast<int32_t>(p.ids.size()));
  }
  DraftProposerConfig pc = proposer_config(64);
  pc.max_batch_tokens = 7;
  pc.max_batch_seqs = 3;
  DraftModelProposer p(load_draft(), pc);
  const GenerateConfig cfg = greedy_config();
  const int32_t k = 4;
  for (int round = 0; round < 4; ++round) {
    const std::vector<Proposal> out = propose(p, tokens, lens, k, cfg);
    for (size_t i = 0; i < tokens.size(); ++i) {
      ASSERT_EQ(out[i].tokens, expected_drafts(ref, tokens[i], k))
          << prompts[i].text << " round " << round;
      const std::vector<int32_t>& d = out[i].tokens;
      const size_t j = (i + static_cast<size_t>(round)) % (d.size() + 1);
      tokens[i].insert(tokens[i].end(), d.begin(), d.begin() + static_cast<ptrdiff_t>(j));
      // All kept: the draft's own next token; else anything but the rejected draft.
      const int32_t own = j == d.size() ? ref.greedy(tokens[i], 1)[0] : (d[j] + 1 + round) % 32000;
      tokens[i].push_back(own == kEos ? 3 : own);
      // Some sequences move on by a second token before the next call (steps without
      // drafts): the draft's cache then differs from the tokens before their last one.
      if ((i + static_cast<size_t>(round)) % 3 == 0) tokens[i].push_back(13 + round);
    }
  }
  // The sequences' blocks stay until released; then every block is free again.
  EXPECT_LT(p.num_free_blocks(), p.num_blocks());
  for (size_t i = 0; i < tokens.size(); ++i) p.release(static_cast<int64_t>(i));
  EXPECT_EQ(p.num_free_blocks(), p.num_blocks());
  EXPECT_EQ(p.num_sequences(), 0);
}

// A cache for two sequences serves many, one after another, when each is released.
TEST(DraftModelProposer, ReleaseFreesBlocksForOtherSequences) {
  Reference ref;
  const std::vector<Prompt> prompts = reference_prompts();
  DraftModelProposer p(load_draft(), proposer_config(4));  // 64 tokens
  const GenerateConfig cfg = greedy_config();
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int64_t id = static_cast<int64_t>(pass * 100 + static_cast<int>(i));
      const std::vector<int32_t>& t = prompts[i].ids;
      const std::vector<Proposal> out =
          propose(p, {t}, {static_cast<int32_t>(t.size())}, 8, cfg, id);
      EXPECT_EQ(out[0].tokens, expected_drafts(ref, t, 8)) << prompts[i].text;
      EXPECT_LT(p.num_free_blocks(), 4);
      p.release(id);
      EXPECT_EQ(p.num_free_blocks(), 4);
    }
  }
  p.release(12345);  // unknown: nothing happens
  EXPECT_EQ(p.num_free_blocks(), 4);
}

// A full cache never fails the step: sequences that do not fit get fewer drafts or none
// (those that get some still get the right ones), and sequences absent from a call give
// their blocks back to the ones present.
TEST(DraftModelProposer, FullCacheGivesFewerDrafts) {
  Reference ref;
  const std::vector<Prompt> prompts = reference_prompts();
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> lens;
  for (const Prompt& p : prompts) {
    tokens.push_back(p.ids);
    lens.push_back(static_cast<int32_t>(p.ids.size()));
  }
  DraftModelProposer p(load_draft(), proposer_config(3));  // 48 tokens
  const GenerateConfig cfg = greedy_config();
  const std::vector<Proposal> out = propose(p, tokens, lens, 8, cfg);
  int with = 0, without = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<int32_t> want = expected_drafts(ref, tokens[i], 8);
    ASSERT_LE(out[i].tokens.size(), want.size());
    EXPECT_TRUE(std::equal(out[i].tokens.begin(), out[i].tokens.end(), want.begin()));
    (out[i].tokens.empty() ? without : with) += 1;
  }
  EXPECT_GE(with, 2);
  EXPECT_GE(without, 1);
  EXPECT_EQ(p.num_free_blocks(), 0);
  // Without releases: each later call takes the blocks of sequences it does not name.
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<Proposal> one =
        propose(p, {tokens[i]}, {lens[i]}, 8, cfg, static_cast<int64_t>(i));
    EXPECT_EQ(one[0].tokens, expected_drafts(ref, tokens[i], 8)) << prompts[i].text;
  }
  // A sequence longer than the whole cache gets nothing, and the call goes on.
  std::vector<int32_t> long_seq;
  for (int r = 0; r < 4; ++r) long_seq.insert(long_seq.end(), tokens[1].begin(), tokens[1].end());
  const std::vector<Proposal> two = propose(p, {long_seq, tokens[0]}, {16, lens[0]}, 8, cfg, 50);
  EXPECT_TRUE(two[0].tokens.empty());
  EXPECT_EQ(two[1].tokens, expected_drafts(ref, tokens[0], 8));
}

TEST(DraftModelProposer, SampledProposalsCarryTheirDistribution) {
  const std::vector<Prompt> prompts = reference_prompts();
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> lens;
  for (const Prompt& p : prompts) {
    tokens.push_back(p.ids);
    lens.push_back(static_cast<int32_t>(p.ids.size()));
  }
  const GenerateConfig cfg = sampled_config();
  DraftModelProposer a(load_draft(), proposer_config(64));
  const std::vector<Proposal> first = propose(a, tokens, lens, 4, cfg);
  const int32_t vocab = 32000;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Proposal& pr = first[i];
    ASSERT_FALSE(pr.tokens.empty());
    ASSERT_EQ(pr.probs.size(), pr.tokens.size() * static_cast<size_t>(vocab));
    for (size_t j = 0; j < pr.tokens.size(); ++j) {
      const float* row = pr.probs.data() + j * static_cast<size_t>(vocab);
      double sum = 0.0;
      int32_t nonzero = 0;
      for (int32_t v = 0; v < vocab; ++v) {
        ASSERT_GE(row[v], 0.0f);
        sum += row[v];
        nonzero += row[v] > 0.0f ? 1 : 0;
      }
      EXPECT_NEAR(sum, 1.0, 1e-4);
      EXPECT_GT(row[pr.tokens[j]], 0.0f);
      EXPECT_LE(nonzero, cfg.top_k);  // top-k (and top-p within it) hold
      EXPECT_GE(nonzero, 1);
    }
  }
  // The same keys give the same tokens and distributions, in a fresh proposer and in
  // the same one (its cache then holds the drafts already).
  DraftModelProposer b(load_draft(), proposer_config(64));
  const std::vector<Proposal> again = propose(b, tokens, lens, 4, cfg);
  const std::vector<Proposal> third = propose(a, tokens, lens, 4, cfg);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(again[i].tokens, first[i].tokens);
    EXPECT_EQ(third[i].tokens, first[i].tokens);
    ASSERT_EQ(again[i].probs.size(), first[i].probs.size());
    for (size_t v = 0; v < first[i].probs.size(); ++v)
      ASSERT_NEAR(again[i].probs[v], first[i].probs[v], 1e-6f);
  }
  // Other seeds draw other tokens somewhere.
  bool differs = false;
  for (uint64_t seed = 100; seed < 104 && !differs; ++seed) {
    GenerateConfig other = cfg;
    other.random_seed = seed;
    const std::vector<Proposal> o = propose(b, tokens, lens, 4, other);
    for (size_t i = 0; i < tokens.size(); ++i) differs |= o[i].tokens != first[i].tokens;
  }
  EXPECT_TRUE(differs);
}

TEST(DraftModelProposer, DrawSetFollowsTheSamplersRules) {
  std::vector<float> x = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  const float inf = std::numeric_limits<float>::infinity();
  GenerateConfig c;
  c.temperature = 1.0f;
  c.top_k = 2;
  std::vector<float> y = x;
  restrict_to_draw_set(y.data(), 6, c);
  EXPECT_EQ(y, (std::vector<float>{-inf, 3.0f, -inf, 3.0f, -inf, -inf}));
  c.top_k = 0;
  c.top_p = 0.5f;  // the two 3.0s hold 0.61 of the mass: the first alone does not
  y = x;
  restrict_to_draw_set(y.data(), 6, c);
  EXPECT_EQ(y, (std::vector<float>{-inf, 3.0f, -inf, 3.0f, -inf, -inf}));
  c.top_p = 1.0f;
  c.min_p = std::exp(-1.5f);  // logits within 1.5 of the top
  y = x;
  restrict_to_draw_set(y.data(), 6, c);
  EXPECT_EQ(y, (std::vector<float>{-inf, 3.0f, 2.0f, 3.0f, -inf, -inf}));
  c.temperature = 0.0f;  // greedy: untouched
  y = x;
  restrict_to_draw_set(y.data(), 6, c);
  EXPECT_EQ(y, x);
}

TEST(DraftModelProposer, RefusesBadConfigurationAndCalls) {
  EXPECT_THROW(DraftModelProposer(load_draft(), proposer_config(0)), InvalidArgument);
  DraftProposerConfig c = proposer_config(4);
  c.max_batch_tokens = 0;
  EXPECT_THROW(DraftModelProposer(load_draft(), c), InvalidArgument);
  EXPECT_THROW(DraftModelProposer(nullptr, proposer_config(4)), InvalidArgument);
  DraftModelProposer p(load_draft(), proposer_config(4));
  const std::vector<int32_t> t = {1, 415, 5398};
  const GenerateConfig cfg = greedy_config();
  ProposalRequest r;
  r.tokens = t;
  r.prompt_len = 3;
  r.max_tokens = 2;
  r.config = &cfg;
  std::vector<Proposal> none;
  EXPECT_THROW(p.propose(std::span<const ProposalRequest>(&r, 1), none), InvalidArgument);
  std::vector<ProposalRequest> twice = {r, r};
  std::vector<Proposal> out(2);
  EXPECT_THROW(p.propose(twice, out), InvalidArgument);
  // Ids the draft does not have, or k = 0: no drafts, no error.
  const std::vector<int32_t> bad = {1, 40000};
  r.tokens = bad;
  r.prompt_len = 2;
  r.seq_id = 9;
  std::vector<Proposal> one(1);
  p.propose(std::span<const ProposalRequest>(&r, 1), one);
  EXPECT_TRUE(one[0].tokens.empty());
  r.tokens = t;
  r.max_tokens = 0;
  p.propose(std::span<const ProposalRequest>(&r, 1), one);
  EXPECT_TRUE(one[0].tokens.empty());
}

}  // namespace
}  // namespace tachyon
