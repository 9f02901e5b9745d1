// Speculative decoding through the engine, over the fake model (which reads every token
// back through the block tables: a rejected draft left in a block that is read again, or
// one indexed by the prefix cache, changes the output and counts as a violation).
// Greedy requests produce token for token (log-probabilities included) what plain
// decoding produces, whatever the proposals (right, random, a mix), under preemption
// (recompute and swap), chunked prefill, the prefix cache, device sampling with queued
// steps, stop words, logits processors and n > 1; sampled requests keep the target's
// distribution.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "engine/proposer.h"
#include "engine/speculation.h"
#include "engine_test_util.h"

namespace tachyon::testing {
namespace {

// Proposes the target's greedy continuation (kRight), random tokens (kRandom), or the
// greedy continuation with a third of its tokens replaced by random ones (kMix).
class TestProposer : public Proposer {
 public:
  enum Mode { kRight, kRandom, kMix };
  TestProposer(Mode mode, FakeModelOptions o) : mode_(mode), o_(o) {}
  std::string_view name() const override { return "test"; }
  void propose(std::span<const ProposalRequest> reqs, std::span<Proposal> out) override {
    ++calls_;
    std::vector<float> logits(static_cast<size_t>(o_.vocab));
    const std::vector<int32_t> eos = {o_.eos};
    for (size_t i = 0; i < reqs.size(); ++i) {
      const ProposalRequest& q = reqs[i];
      EXPECT_GT(q.max_tokens, 0);
      std::vector<int32_t> tokens(q.tokens.begin(), q.tokens.end());
      std::mt19937 rng(
          static_cast<uint32_t>(mix64(static_cast<uint64_t>(q.seq_id) * 977 + tokens.size())));
      GenerateConfig greedy_cfg = *q.config;
      greedy_cfg.temperature = 0.0f;
      for (int32_t j = 0; j < q.max_tokens; ++j) {
        int32_t t = 0;
        if (mode_ == kRandom || (mode_ == kMix && rng() % 3 == 0)) {
          t = static_cast<int32_t>(rng() % static_cast<uint32_t>(o_.vocab));
        } else {
          FakeModel::reference_logits(tokens, o_, logits.data());
          SamplingContext ctx;
          ctx.config = &greedy_cfg;
          ctx.tokens = tokens;
          ctx.prompt_len = q.prompt_len;
          ctx.eos_ids = eos;
          t = sampler_.sample(logits.data(), o_.vocab, ctx).token;
        }
        out[i].tokens.push_back(t);
        tokens.push_back(t);
      }
    }
  }
  void release(int64_t) override { ++released_; }
  int64_t calls() const { return calls_; }
  int64_t released() const { return released_; }

 private:
  Mode mode_;
  FakeModelOptions o_;
  Sampler sampler_;
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> released_{0};
};

struct Case {
  std::vector<int32_t> prompt;
  GenerateConfig cfg;
};

// Greedy requests of every kind the engine speculates for.
std::vector<Case> greedy_cases(const FakeModelOptions& o, int32_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Case> cases;
  for (int32_t i = 0; i < count; ++i) {
    Case c;
    c.prompt = random_prompt(rng, 3 + static_cast<int32_t>(rng() % 38), o.vocab, o.eos);
    c.cfg = greedy(24);
    if (i % 3 == 1) {
      c.cfg.return_logprobs = true;
      c.cfg.top_logprobs = 2;
    }
    if (i % 5 == 2) c.cfg.repetition_penalty = 1.3f;
    if (i % 5 == 3) c.cfg.min_new_tokens = 10;
    if (i % 4 == 3) {
      // A stop word from the middle of the plain output.
      const RefOutput ref = reference_generate(c.prompt, c.cfg, o, 0, 0, 24);
      if (ref.ids.size() > 8) c.cfg.stop_words_list = {{ref.ids[6], ref.ids[7]}};
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<GenerateResult> run_all(AsyncModel& engine, const std::vector<Case>& cases) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Case& c : cases) streams.push_back(engine.submit({c.prompt, c.cfg}));
  std::vector<GenerateResult> out;
  for (auto& s : streams) out.push_back(s->wait());
  return out;
}

void expect_reference(const std::vector<Case>& cases, const std::vector<GenerateResult>& results,
                      const FakeModelOptions& o, const std::string& what) {
  ASSERT_EQ(cases.size(), results.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const GenerateResult& r = results[i];
    ASSERT_FALSE(r.error) << what << " request " << i << ": " << r.error->message;
    const int32_t n = cases[i].cfg.num_return_sequences;
    ASSERT_EQ(static_cast<int32_t>(r.sequences.size()), n) << what;
    for (int32_t k = 0; k < n; ++k) {
      const RefOutput ref =
          reference_generate(cases[i].prompt, cases[i].cfg, o, 0, k, *cases[i].cfg.max_new_tokens);
      const SequenceOutput& got = r.sequences[static_cast<size_t>(k)];
      EXPECT_EQ(got.output_ids, ref.ids) << what << " request " << i << " sequence " << k;
      EXPECT_EQ(got.finish_reason, ref.reason) << what << " request " << i;
      if (cases[i].cfg.return_logprobs) {
        ASSERT_EQ(got.logprobs.size(), ref.logprobs.size()) << what << " request " << i;
        for (size_t j = 0; j < ref.logprobs.size(); ++j)
          EXPECT_EQ(got.logprobs[j], ref.logprobs[j]) << what << " request " << i;
        for (const auto& top : got.top_logprobs) EXPECT_EQ(top.size(), 2u);
      }
    }
  }
}

struct EngineCase {
  std::string name;
  EngineConfig config;
  FakeModelOptions model;
  bool twice = false;  // the requests again, after the first round (the prefix cache)
};

std::vector<EngineCase> engine_cases() {
  std::vector<EngineCase> out;
  FakeModelOptions o;
  o.eos_bias = 1.0f;
  {
    EngineCase c{"plain", small_engine(256), o};
    c.config.prefix_caching = false;
    out.push_back(c);
  }
  {
    // 80 token slots for a dozen requests of up to 64 tokens: preempted and recomputed.
    EngineCase c{"recompute", small_engine(20), o};
    c.config.prefix_caching = false;
    c.config.kv_reserve_fraction = 0;
    out.push_back(c);
  }
  {
    EngineCase c{"swap", small_engine(20), o};
    c.model.can_swap = true;
    c.config.swap_space_bytes = 64 * 4 * 64;
    c.config.prefix_caching = false;
    c.config.kv_reserve_fraction = 0;
    out.push_back(c);
  }
  {
    EngineCase c{"chunked", small_engine(256), o};
    c.config.max_num_seqs = 4;
    c.config.max_num_batched_tokens = 12;
    out.push_back(c);
  }
  {
    EngineCase c{"prefix cache", small_engine(48), o};
    c.config.prefix_caching = true;
    c.twice = true;
    out.push_back(c);
  }
  return out;
}

TEST(SpeculativeEngine, GreedyOutputsAreThoseOfPlainDecoding) {
  int64_t preemptions = 0;
  for (const EngineCase& ec : engine_cases()) {
    const auto cases = greedy_cases(ec.model, 12, 5);
    for (auto mode : {TestProposer::kRight, TestProposer::kRandom, TestProposer::kMix}) {
      const std::string what = ec.name + " mode " + std::to_string(mode);
      auto proposer = std::make_shared<TestProposer>(mode, ec.model);
      EngineConfig c = ec.config;
      c.proposer = proposer;
      c.num_speculative_tokens = 4;
      auto t = make_engine(ec.model, c);
      expect_reference(cases, run_all(*t.engine, cases), ec.model, what);
      if (ec.twice) expect_reference(cases, run_all(*t.engine, cases), ec.model, what + " again");
      const EngineStats s = t.engine->stats();
      EXPECT_EQ(t.model->violations(), 0) << what;
      EXPECT_GT(s.spec_num_drafts, 0) << what;
      EXPECT_GT(proposer->calls(), 0) << what;
      EXPECT_GT(proposer->released(), 0) << what;
      if (mode == TestProposer::kRight) {
        // Drafts dropped for the budget are not counted: every draft verified is right.
        EXPECT_EQ(s.spec_num_accepted_tokens, s.spec_num_draft_tokens) << what;
        EXPECT_LT(s.num_steps, 12 * 24) << what;
      }
      if (mode == TestProposer::kRandom) {
        EXPECT_LT(s.spec_num_accepted_tokens * 4, s.spec_num_draft_tokens) << what;
      }
      if (ec.twice) {
        EXPECT_GT(s.prefix_cache_hits, 0) << what;
      }
      preemptions += s.num_preemptions;
      int64_t per_pos = 0;
      for (int64_t n : s.spec_accepted_per_pos) per_pos += n;
      EXPECT_EQ(per_pos, s.spec_num_accepted_tokens) << what;
    }
  }
  EXPECT_GT(preemptions, 0);
}

// Random proposals, each recorded with the tokens it followed.
class RecordingProposer : public TestProposer {
 public:
  explicit RecordingProposer(FakeModelOptions o) : TestProposer(kRandom, o) {}
  void propose(std::span<const ProposalRequest> reqs, std::span<Proposal> out) override {
    TestProposer::propose(reqs, out);
    for (size_t i = 0; i < reqs.size(); ++i) {
      std::vector<int32_t> r(reqs[i].tokens.begin(), reqs[i].tokens.end());
      r.insert(r.end(), out[i].tokens.begin(), out[i].tokens.end());
      records.push_back(std::move(r));
    }
  }
  std::vector<std::vector<int32_t>> records;  // read once the engine is idle
};

TEST(SpeculativeEngine, ThePrefixCacheNeverIndexesRejectedDrafts) {
  // Prompts that repeat a sequence's context followed by drafts it rejected: a block
  // indexed under tokens that included a rejected draft (then overwritten by the token
  // chosen instead) would be reused for them, with the wrong K/V.
  FakeModelOptions o;
  auto proposer = std::make_shared<RecordingProposer>(o);
  EngineConfig c = small_engine(512);
  c.prefix_caching = true;
  c.proposer = proposer;
  c.num_speculative_tokens = 4;
  auto t = make_engine(o, c);
  std::mt19937 rng(21);
  GenerateConfig cfg = greedy(40);
  cfg.ignore_eos = true;
  const auto prompt = random_prompt(rng, 9, o.vocab, o.eos);
  const GenerateResult first = t.engine->submit({prompt, cfg})->wait();
  ASSERT_FALSE(first.error);
  std::vector<int32_t> full = prompt;
  for (int32_t id : first.sequences.at(0).output_ids) full.push_back(id);
  int32_t checked = 0;
  const auto records = proposer->records;  // the later requests propose too
  for (const auto& rec : records) {
    if (rec.size() <= full.size() && std::equal(rec.begin(), rec.end(), full.begin()))
      continue;  // nothing rejected
    std::vector<int32_t> p = rec;
    p.push_back(7);
    const GenerateResult r = t.engine->submit({p, greedy(3)})->wait();
    ASSERT_FALSE(r.error);
    EXPECT_EQ(r.sequences.at(0).output_ids, reference_greedy(p, o, 3, true));
    ++checked;
  }
  EXPECT_GT(checked, 5);
  EXPECT_GT(t.engine->stats().prefix_cache_hits, 0);
  EXPECT_EQ(t.model->violations(), 0);
}

TEST(SpeculativeEngine, SeveralSequencesPerRequestEachSpeculate) {
  FakeModelOptions o;
  std::vector<Case> cases = greedy_cases(o, 4, 9);
  for (Case& c : cases) c.cfg.num_return_sequences = 3;
  auto proposer = std::make_shared<TestProposer>(TestProposer::kMix, o);
  EngineConfig c = small_engine(256);
  c.proposer = proposer;
  c.num_speculative_tokens = 3;
  auto t = make_engine(o, c);
  expect_reference(cases, run_all(*t.engine, cases), o, "n = 3");
  EXPECT_EQ(t.model->violations(), 0);
  EXPECT_GT(t.engine->stats().spec_num_accepted_tokens, 0);
}

TEST(SpeculativeEngine, QueuedStepsOnTheDeviceGiveWayToProposals) {
  FakeModelOptions o;
  const auto cases = greedy_cases(o, 8, 13);
  auto model = std::make_shared<DeviceSamplingModel>(o);
  EngineConfig c = small_engine(256);
  c.eos_token_ids = {o.eos};
  c.proposer = std::make_shared<TestProposer>(TestProposer::kMix, o);
  c.num_speculative_tokens = 5;
  AsyncModel engine(model, c);
  expect_reference(cases, run_all(engine, cases), o, "device sampling");
  EXPECT_EQ(model->violations(), 0);
  EXPECT_GT(engine.stats().spec_num_accepted_tokens, 0);
}

TEST(SpeculativeEngine, RequestsReportTheirDraftsAndMayOptOut) {
  FakeModelOptions o;
  std::mt19937 rng(3);
  EngineConfig c = small_engine(256);
  c.proposer = std::make_shared<TestProposer>(TestProposer::kRight, o);
  c.num_speculative_tokens = 4;
  auto t = make_engine(o, c);
  GenerateConfig cfg = greedy(20);
  cfg.ignore_eos = true;
  const auto prompt = random_prompt(rng, 10, o.vocab, o.eos);
  const GenerateResult on = t.engine->submit({prompt, cfg})->wait();
  ASSERT_FALSE(on.error);
  EXPECT_GT(on.timings.speculative_draft_rounds, 0);
  ASSERT_EQ(on.timings.speculative_accepted_tokens_per_pos.size(), 4u);
  // Every draft right: 1 prompt step, then 19 tokens in steps of 5 (the last of 4).
  EXPECT_EQ(on.timings.speculative_draft_rounds, 4);
  EXPECT_EQ(on.timings.speculative_accepted_tokens_per_pos, (std::vector<int32_t>{4, 4, 4, 3}));
  cfg.force_disable_sp_run = true;
  const GenerateResult off = t.engine->submit({prompt, cfg})->wait();
  ASSERT_FALSE(off.error);
  EXPECT_EQ(off.timings.speculative_draft_rounds, 0);
  EXPECT_TRUE(off.timings.speculative_accepted_tokens_per_pos.empty());
  EXPECT_EQ(off.sequences.at(0).output_ids, on.sequences.at(0).output_ids);
  // Beams never speculate.
  GenerateConfig beams = greedy(6);
  beams.num_beams = 2;
  const GenerateResult b = t.engine->submit({prompt, beams})->wait();
  ASSERT_FALSE(b.error);
  EXPECT_EQ(b.timings.speculative_draft_rounds, 0);
}

TEST(SpeculativeEngine, TheNumberOfDraftTokensIsChecked) {
  FakeModelOptions o;
  for (int32_t k : {0, -1, 17}) {
    EngineConfig c = small_engine(64);
    c.proposer = std::make_shared<TestProposer>(TestProposer::kRight, o);
    c.num_speculative_tokens = k;
    EXPECT_THROW(make_engine(o, c), InvalidArgument) << k;
  }
}

TEST(SpeculativeEngine, SampledOutputsKeepTheTargetDistribution) {
  // Tokens 2 and 3 of a request (token 2 drafted and verified, token 3 the bonus draw or a
  // plain step's) over many seeds, against their exact distribution.
  FakeModelOptions o;
  o.vocab = 8;
  o.scale = 1.5f;
  o.eos = -1;
  const std::vector<int32_t> prompt = {1, 5, 2};
  GenerateConfig cfg;
  cfg.temperature = 0.9f;
  cfg.max_new_tokens = 3;
  EngineConfig c = small_engine(1024);
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 256;
  c.eos_token_ids = {};
  c.proposer = std::make_shared<TestProposer>(TestProposer::kMix, o);
  c.num_speculative_tokens = 2;
  TestEngine t;
  t.model = std::make_shared<FakeModel>(o);
  t.engine = std::make_unique<AsyncModel>(t.model, c);
  constexpr int32_t kN = 8000;
  std::vector<int64_t> counts(64, 0);
  for (int32_t base = 0; base < kN; base += 500) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int32_t i = base; i < base + 500; ++i) {
      GenerateConfig ci = cfg;
      ci.random_seed = static_cast<uint64_t>(i) * 7919 + 1;
      streams.push_back(t.engine->submit({prompt, ci}));
    }
    for (auto& s : streams) {
      const GenerateResult r = s->wait();
      ASSERT_FALSE(r.error);
      const auto& ids = r.sequences.at(0).output_ids;
      ASSERT_EQ(ids.size(), 3u);
      ++counts[static_cast<size_t>(ids[1] * 8 + ids[2])];
    }
  }
  EXPECT_GT(t.engine->stats().spec_num_accepted_tokens, 0);
  // The exact distribution of (token 2, token 3).
  std::vector<double> expected(64, 0.0);
  std::vector<float> logits(8), p1, p2, p3;
  std::vector<int32_t> h = prompt;
  FakeModel::reference_logits(h, o, logits.data());
  draw_distribution(logits.data(), 8, cfg, &p1);
  for (int32_t a = 0; a < 8; ++a) {
    std::vector<int32_t> ha = h;
    ha.push_back(a);
    FakeModel::reference_logits(ha, o, logits.data());
    draw_distribution(logits.data(), 8, cfg, &p2);
    for (int32_t b = 0; b < 8; ++b) {
      std::vector<int32_t> hb = ha;
      hb.push_back(b);
      FakeModel::reference_logits(hb, o, logits.data());
      draw_distribution(logits.data(), 8, cfg, &p3);
      for (int32_t d = 0; d < 8; ++d)
        expected[static_cast<size_t>(b * 8 + d)] += p1[a] * p2[b] * p3[d];
    }
  }
  double x2 = 0.0;
  for (size_t i = 0; i < 64; ++i) {
    const double e = expected[i] * kN;
    x2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  EXPECT_LT(x2, 103.4);  // the 0.999 quantile of chi-square with 63 degrees of freedom
}

}  // namespace
}  // namespace tachyon::testing
