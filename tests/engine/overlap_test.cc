// Steps queued ahead (EngineConfig::overlap_steps): the engine launches step N + 1
// before it has seen step N's tokens, which the model takes on its device
// (ForwardBatch::deferred). Whatever happens to the sequences meanwhile (they end by EOS,
// stop words, are cancelled, preempted, or fail), every request must produce
// exactly what the engine produces without overlap, and the cache's books must balance.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "engine_test_util.h"

namespace tachyon::testing {
namespace {

struct EngineRun {
  std::vector<GenerateResult> results;
  EngineStats stats;
  int64_t deferred_steps = 0;
  int64_t deferred_tokens = 0;
  int64_t violations = 0;
  int64_t masked_rows = 0;
};

EngineRun run_engine(const FakeModelOptions& o, EngineConfig ec,
                     const std::vector<GenerateRequest>& reqs, bool overlap) {
  auto model = std::make_shared<DeviceSamplingModel>(o);
  ec.overlap_steps = overlap;
  if (ec.eos_token_ids.empty()) ec.eos_token_ids = {o.eos};
  AsyncModel engine(model, ec);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(engine.submit(r));
  EngineRun run;
  for (auto& s : streams) run.results.push_back(s->wait());
  run.stats = engine.stats();
  run.deferred_steps = model->deferred_steps();
  run.deferred_tokens = model->deferred_tokens();
  run.violations = model->violations();
  run.masked_rows = model->masked_rows();
  return run;
}

void expect_same(const EngineRun& a, const EngineRun& b) {
  ASSERT_EQ(a.results.size(), b.results.size());
  for (size_t i = 0; i < a.results.size(); ++i) {
    const auto& x = a.results[i];
    const auto& y = b.results[i];
    ASSERT_EQ(x.error.has_value(), y.error.has_value()) << "request " << i;
    if (x.error) {
      EXPECT_EQ(x.error->code, y.error->code) << "request " << i;
    }
    ASSERT_EQ(x.sequences.size(), y.sequences.size()) << "request " << i;
    for (size_t k = 0; k < x.sequences.size(); ++k) {
      EXPECT_EQ(x.sequences[k].output_ids, y.sequences[k].output_ids) << "request " << i;
      EXPECT_EQ(x.sequences[k].finish_reason, y.sequences[k].finish_reason) << "request " << i;
      EXPECT_EQ(x.sequences[k].logprobs, y.sequences[k].logprobs) << "request " << i;
    }
  }
  EXPECT_EQ(a.violations, 0);
  EXPECT_EQ(b.violations, 0);
  for (const EngineRun* r : {&a, &b}) {
    EXPECT_EQ(r->stats.num_free_blocks, r->stats.num_kv_blocks);
    EXPECT_EQ(r->stats.num_running, 0);
    EXPECT_EQ(r->stats.num_waiting, 0);
  }
}

// Requests that can be queued ahead (greedy, seeded sampling, logit bias, min_new_tokens,
// stop words, varied lengths, n = 2) beside some that cannot (logprobs, penalties, bans,
// beams), so that steps switch between overlapped and waited-for.
std::vector<GenerateRequest> requests(int n, int32_t vocab, int32_t eos, uint32_t seed,
                                      bool only_overlappable) {
  std::mt19937 rng(seed);
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 2 + static_cast<int32_t>(rng() % 30), vocab, eos);
    GenerateConfig& c = r.config;
    c.max_new_tokens = 1 + static_cast<int32_t>(rng() % 40);
    c.random_seed = 1000 + static_cast<uint64_t>(i);
    const int kind = static_cast<int>(rng() % (only_overlappable ? 5 : 9));
    switch (kind) {
      case 0:
        c.temperature = 0.f;
        break;
      case 1:
        c.temperature = 0.8f, c.top_p = 0.9f, c.top_k = 20;
        break;
      case 2:
        c.temperature = 0.f, c.stop_words_list = {{static_cast<int32_t>(rng() % vocab)}};
        break;
      case 3:
        c.logit_bias = {{5, 2.f}}, c.temperature = 0.7f;
        c.min_new_tokens = std::min(3, *c.max_new_tokens);
        break;
      case 4:
        c.num_return_sequences = 2, c.temperature = 1.0f;
        break;
      case 5:
        c.return_logprobs = true, c.top_logprobs = 2;
        break;
      case 6:
        c.repetition_penalty = 1.2f, c.temperature = 0.f;
        break;
      case 7:
        c.num_beams = 2;
        break;
      default:
        c.no_repeat_ngram_size = 2, c.bad_words_list = {{7}};
        break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

TEST(Overlap, SameOutputsAsWaitingForEachStep) {
  FakeModelOptions o;
  o.vocab = 60;
  o.eos_bias = 1.0f;  // many sequences end by EOS, with their next step in flight
  EngineConfig ec;
  ec.max_num_seqs = 24;
  ec.max_num_batched_tokens = 96;
  ec.num_kv_blocks = 600;
  ec.block_size = 4;
  for (bool only : {true, false}) {
    const auto reqs = requests(120, o.vocab, o.eos, only ? 1 : 2, only);
    const EngineRun serial = run_engine(o, ec, reqs, false);
    const EngineRun ahead = run_engine(o, ec, reqs, true);
    SCOPED_TRACE(only ? "overlappable requests only" : "mixed requests");
    expect_same(serial, ahead);
    EXPECT_EQ(serial.stats.overlapped_steps, 0);
    EXPECT_EQ(serial.deferred_tokens, 0);
    EXPECT_EQ(serial.stats.tokens_discarded, 0);
    EXPECT_EQ(ahead.stats.tokens_generated, serial.stats.tokens_generated);
    EXPECT_EQ(ahead.stats.num_preemptions, 0);
    EXPECT_EQ(serial.stats.num_preemptions, 0);
    // The same work, plus what was computed for sequences that had ended.
    EXPECT_EQ(ahead.stats.tokens_computed,
              serial.stats.tokens_computed + ahead.stats.tokens_discarded);
    // A step that samples for a request needing the host (logprobs, beams, penalties)
    // is waited for, so mixed requests overlap less.
    EXPECT_GT(ahead.stats.overlapped_steps, only ? 40 : 2);
    EXPECT_GT(ahead.deferred_tokens, only ? 200 : 5);
    if (only) {
      EXPECT_GT(ahead.stats.tokens_discarded, 0);  // EOS with the next step queued
    }
  }
}

TEST(Overlap, PreemptionUnderATinyCache) {
  FakeModelOptions o;
  o.vocab = 40;
  EngineConfig ec;
  ec.max_num_seqs = 32;
  ec.max_num_batched_tokens = 64;
  ec.num_kv_blocks = 40;  // far less than the requests need at once
  ec.block_size = 4;
  std::mt19937 rng(5);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 30; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 3 + static_cast<int32_t>(rng() % 10), o.vocab, o.eos);
    r.config = greedy(10 + static_cast<int32_t>(rng() % 30));
    r.config.ignore_eos = i % 3 != 0;
    reqs.push_back(std::move(r));
  }
  const EngineRun serial = run_engine(o, ec, reqs, false);
  const EngineRun ahead = run_engine(o, ec, reqs, true);
  expect_same(serial, ahead);
  EXPECT_GT(ahead.stats.num_preemptions, 0);
  EXPECT_GT(ahead.deferred_tokens, 20);
  // Against the model's own greedy continuation.
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto ref = reference_generate(reqs[i].prompt_ids, reqs[i].config, o, 0, 0,
                                        *reqs[i].config.max_new_tokens);
    EXPECT_EQ(ahead.results[i].sequences.at(0).output_ids, ref.ids) << "request " << i;
  }
}

// A request whose prompt makes the forward pass fail, admitted while a step is in
// flight: it fails alone, the others go on unchanged.
TEST(Overlap, OneBadRequestFailsAlone) {
  FakeModelOptions o;
  o.vocab = 60;
  o.poison_token = 50;
  o.delay_us = 500;
  EngineConfig ec;
  ec.num_kv_blocks = 512;
  ec.block_size = 4;
  ec.max_num_seqs = 16;
  ec.max_num_batched_tokens = 64;
  ec.eos_token_ids = {o.eos};
  auto model = std::make_shared<DeviceSamplingModel>(o);
  AsyncModel engine(model, ec);
  std::mt19937 rng(6);
  GenerateConfig c = greedy(30);
  c.ignore_eos = true;
  c.logit_bias = {{50, -1e4f}};  // the poison only comes from the prompt
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(random_prompt(rng, 8, o.vocab, 50));
    streams.push_back(engine.submit({prompts.back(), c}));
  }
  // Submitted once the others are decoding with steps queued ahead.
  while (model->deferred_steps() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto bad = engine.submit({{4, 50, 6}, c});
  EXPECT_TRUE(bad->wait().error.has_value());
  FakeModelOptions clean = o;
  clean.poison_token = -1;
  for (size_t i = 0; i < streams.size(); ++i) {
    const auto r = streams[i]->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    EXPECT_EQ(r.sequences.at(0).output_ids, reference_generate(prompts[i], c, clean, 0, 0, 30).ids)
        << "request " << i;
  }
  EXPECT_TRUE(engine.healthy());
  const auto s = engine.stats();
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
  EXPECT_EQ(model->violations(), 0);
}

// Cancelling requests while their next tokens are in flight: the others' outputs are
// untouched and every block comes back.
TEST(Overlap, CancellationWithStepsInFlight) {
  FakeModelOptions o;
  o.vocab = 60;
  o.delay_us = 200;
  EngineConfig ec;
  ec.num_kv_blocks = 1024;
  ec.block_size = 4;
  ec.max_num_seqs = 32;
  ec.max_num_batched_tokens = 128;
  ec.eos_token_ids = {o.eos};
  auto model = std::make_shared<DeviceSamplingModel>(o);
  AsyncModel engine(model, ec);
  std::mt19937 rng(7);
  GenerateConfig c = greedy(60);
  c.ignore_eos = true;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    prompts.push_back(random_prompt(rng, 6, o.vocab, o.eos));
    streams.push_back(engine.submit({prompts.back(), c}));
  }
  // Tokens read before the cancellation (wait() returns the rest).
  std::vector<std::vector<int32_t>> early(streams.size());
  for (size_t i = 0; i < streams.size(); i += 2) {
    while (early[i].size() < 3 + i) {
      auto e = streams[i]->next(std::chrono::seconds(10));
      ASSERT_TRUE(e.has_value());
      early[i].insert(early[i].end(), e->token_ids.begin(), e->token_ids.end());
    }
    streams[i]->cancel();
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    const auto r = streams[i]->wait();
    const auto ref = reference_generate(prompts[i], c, o, 0, 0, 60).ids;
    std::vector<int32_t> got = early[i];
    got.insert(got.end(), r.sequences.at(0).output_ids.begin(), r.sequences.at(0).output_ids.end());
    if (i % 2 == 0) {
      EXPECT_EQ(r.sequences[0].finish_reason, FinishReason::kCancelled);
      ASSERT_LE(got.size(), ref.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin()))
          << "request " << i << ": " << ::testing::PrintToString(got) << " vs "
          << ::testing::PrintToString(ref);
    } else {
      EXPECT_EQ(got, ref) << "request " << i;
    }
  }
  EXPECT_GT(model->deferred_tokens(), 50);
  const auto s = engine.stats();
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
  EXPECT_EQ(model->violations(), 0);
}

}  // namespace
}  // namespace tachyon::testing

namespace tachyon::testing {
namespace {

// A constrained request's next mask needs the token its step chooses: its steps are
// waited for, and what it generates is the same with overlap on or off, and with its
// masks applied on the device or on the host.
TEST(Overlap, ConstrainedRequestsAreNotQueuedAhead) {
  FakeModelOptions o;
  o.vocab = 60;
  std::vector<std::string> bytes;
  for (int32_t t = 0; t < o.vocab; ++t) bytes.push_back(std::string(1 + t % 2, char('a' + t % 7)));
  std::vector<bool> special(bytes.size(), false);
  special[static_cast<size_t>(o.eos)] = true;
  auto vocab =
      std::make_shared<const grammar::TokenVocabulary>(bytes, special, std::vector<int32_t>{o.eos});
  const std::string pattern = "[a-c]{2,9}(dd|e)";
  auto g = std::make_shared<const grammar::CompiledGrammar>(
      grammar::build_grammar({grammar::GrammarSpec::Kind::kRegex, pattern, {}}), vocab);
  EngineConfig ec;
  ec.max_num_seqs = 16;
  ec.num_kv_blocks = 400;
  ec.block_size = 4;
  std::mt19937 rng(9);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 12; ++i) {
    GenerateRequest r;
    r.prompt_ids = random_prompt(rng, 5, o.vocab, o.eos);
    r.config.max_new_tokens = 30;
    r.config.random_seed = 77 + static_cast<uint64_t>(i);
    r.config.num_return_sequences = 1 + i % 2;
    r.config.constraint = grammar::GrammarSpec{grammar::GrammarSpec::Kind::kRegex, pattern, {}};
    r.config.grammar = g;
    reqs.push_back(std::move(r));
  }
  const EngineRun serial = run_engine(o, ec, reqs, false);
  const EngineRun ahead = run_engine(o, ec, reqs, true);
  expect_same(serial, ahead);
  EXPECT_EQ(ahead.stats.overlapped_steps, 0);
  // The rows are masked on the device (SamplingBatch::token_masks) but for the prompt's
  // row of n = 2, which feeds two draws on the host: the same tokens as the host's masks.
  EXPECT_GT(ahead.masked_rows, 40);
  ec.device_sampling = false;
  const EngineRun host = run_engine(o, ec, reqs, true);
  EXPECT_EQ(host.masked_rows, 0);
  expect_same(host, ahead);
  const std::regex re(pattern);
  for (const GenerateResult& r : ahead.results) {
    ASSERT_FALSE(r.error) << r.error->message;
    for (const SequenceOutput& s : r.sequences) {
      std::string text;
      for (int32_t t : s.output_ids) text += bytes[static_cast<size_t>(t)];
      EXPECT_EQ(s.finish_reason, FinishReason::kStop);
      EXPECT_TRUE(std::regex_match(text, re)) << text;
    }
  }
}

}  // namespace
}  // namespace tachyon::testing
