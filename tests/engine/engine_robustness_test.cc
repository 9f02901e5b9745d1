// The engine under errors, faults, timeouts, shutdown and a long mixed load.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <random>
#include <thread>

#include "engine/async_model.h"
#include "engine/engine_test_util.h"

namespace tachyon {
namespace {

using testing::FakeModelOptions;
using testing::greedy;
using ::testing::HasSubstr;
using testing::make_engine;
using testing::random_prompt;
using testing::reference_generate;
using testing::small_engine;

template <typename E>
std::string refusal(AsyncModel& e, GenerateRequest r) {
  try {
    e.submit(std::move(r));
  } catch (const E& err) {
    return err.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(EngineRobustness, SubmitRefusesBadRequestsWithClearErrors) {
  FakeModelOptions o;
  o.max_seq_len = 100;
  auto t = make_engine(o, small_engine(20));
  EXPECT_THAT(refusal<InvalidArgument>(*t.engine, {{}, greedy(5)}), HasSubstr("prompt_ids"));
  EXPECT_THAT(refusal<InvalidArgument>(*t.engine, {{1, 64}, greedy(5)}), HasSubstr("vocabulary"));
  EXPECT_THAT(refusal<InvalidArgument>(*t.engine, {{1, -1}, greedy(5)}), HasSubstr("prompt_ids"));
  EXPECT_THAT(refusal<InvalidArgument>(*t.engine, {{1, 2}, greedy(99)}),
              HasSubstr("max_new_tokens"));
  GenerateConfig bad = greedy(5);
  bad.top_p = 0.0f;
  EXPECT_THAT(refusal<InvalidArgument>(*t.engine, {{1}, bad}), HasSubstr("top_p"));
  GenerateConfig stops = greedy(5);
  stops.stop_words_str = {"x"};
  EXPECT_THAT(refusal<InvalidArgument>(*t.engine, {{1}, stops}), HasSubstr("tokenizer"));
  // 20 blocks of 4 tokens: 80 tokens at most for one sequence.
  EXPECT_THAT(refusal<ResourceExhausted>(*t.engine, {{1, 2, 3}, greedy(78)}),
              HasSubstr("KV cache"));
  EXPECT_NO_THROW(t.engine->submit({{1, 2, 3}, greedy(77)})->wait());
  GenerateConfig wide = greedy(10);
  wide.num_return_sequences = 16;  // 16 x 4 blocks
  EXPECT_THAT(refusal<ResourceExhausted>(*t.engine, {{1, 2, 3}, wide}), HasSubstr("KV cache"));
  EXPECT_TRUE(t.engine->healthy());
}

TEST(EngineRobustness, OneBadRequestFailsAloneInItsBatch) {
  FakeModelOptions o;
  o.poison_token = 50;
  o.delay_us = 2000;  // so that the requests share steps
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  GenerateConfig never_50 = greedy(15);  // the poison only comes from the prompt
  never_50.bad_words_list = {{50}};
  for (int i = 0; i < 9; ++i) {
    auto p = random_prompt(rng, 12, o.vocab, 50);
    if (i == 4) p[6] = 50;
    prompts.push_back(p);
    streams.push_back(t.engine->submit({p, never_50}));
  }
  for (int i = 0; i < 9; ++i) {
    const auto r = streams[static_cast<size_t>(i)]->wait();
    if (i == 4) {
      ASSERT_TRUE(r.error.has_value());
      EXPECT_EQ(r.error->code, ErrorCode::kInvalidArgument);
      EXPECT_THAT(r.error->message, HasSubstr("poisoned"));
      EXPECT_EQ(r.sequences.at(0).finish_reason, FinishReason::kError);
    } else {
      ASSERT_FALSE(r.error.has_value()) << r.error->message;
      FakeModelOptions clean = o;
      clean.poison_token = -1;
      const auto ref =
          reference_generate(prompts[static_cast<size_t>(i)], never_50, clean, 0, 0, 15);
      EXPECT_EQ(r.sequences.at(0).output_ids, ref.ids) << "request " << i;
    }
  }
  EXPECT_TRUE(t.engine->healthy());
  const auto s = t.engine->stats();
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
}

TEST(EngineRobustness, DeviceFaultEndsTheEngine) {
  FakeModelOptions o;
  o.fault_token = 51;
  o.delay_us = 1000;
  auto t = make_engine(o, small_engine(512));
  std::mt19937 rng(12);
  GenerateConfig long_run = greedy(200);
  long_run.ignore_eos = true;
  auto bystander = t.engine->submit({random_prompt(rng, 5, o.vocab, 51), long_run});
  auto culprit = t.engine->submit({{3, 51, 4}, greedy(5)});
  const auto rc = culprit->wait();
  const auto rb = bystander->wait();
  ASSERT_TRUE(rc.error.has_value());
  EXPECT_EQ(rc.error->code, ErrorCode::kInternal);
  ASSERT_TRUE(rb.error.has_value());
  EXPECT_EQ(rb.error->code, ErrorCode::kInternal);
  EXPECT_FALSE(t.engine->healthy());
  EXPECT_FALSE(t.engine->stats().healthy);
  EXPECT_THAT(t.engine->dead_reason(), HasSubstr("fake device fault"));
  EXPECT_THROW(t.engine->submit({{1, 2}, greedy(3)}), Unavailable);
}

TEST(EngineRobustness, TimeoutEndsTheRequest) {
  FakeModelOptions o;
  o.delay_us = 2000;
  auto t = make_engine(o, small_engine(512));
  GenerateConfig c = greedy(400);
  c.ignore_eos = true;
  c.timeout_ms = 30;  // 400 steps of at least 2 ms each cannot fit
  const auto r = t.engine->submit({{1, 2, 3}, c})->wait();
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->code, ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(r.sequences.at(0).finish_reason, FinishReason::kTimeout);
  EXPECT_LT(r.sequences[0].output_ids.size(), 400u);
  EXPECT_TRUE(t.engine->healthy());
}

// Timeouts near the int64 limit (the APIs take any) mean no limit, not an overflowed
// deadline in the past.
TEST(EngineRobustness, HugeTimeoutsDoNotOverflow) {
  auto t = make_engine(FakeModelOptions{}, small_engine(512));
  for (int64_t ms : {std::numeric_limits<int64_t>::max(),
                     std::numeric_limits<int64_t>::max() / 1000, int64_t{9223372036854}}) {
    GenerateConfig c = greedy(8);
    c.ignore_eos = true;
    c.timeout_ms = ms;
    const auto r = t.engine->submit({{1, 2, 3}, c})->wait();
    EXPECT_FALSE(r.error.has_value()) << ms << ": " << r.error->message;
    EXPECT_EQ(r.sequences.at(0).output_ids.size(), 8u) << ms;
  }
}

TEST(EngineRobustness, ShutdownEndsRequestsInFlight) {
  FakeModelOptions o;
  o.delay_us = 1000;
  auto t = make_engine(o, small_engine(512));
  GenerateConfig c = greedy(400);
  c.ignore_eos = true;
  auto s = t.engine->submit({{1, 2, 3}, c});
  ASSERT_TRUE(s->next(std::chrono::seconds(10)).has_value());
  t.engine->shutdown();
  const auto r = s->wait();
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->code, ErrorCode::kUnavailable);
  EXPECT_FALSE(t.engine->healthy());
  EXPECT_THROW(t.engine->submit({{1, 2}, greedy(3)}), Unavailable);
  t.engine->shutdown();  // idempotent
}

TEST(EngineRobustness, TenThousandMixedRequestsFromManyThreads) {
  // Random lengths and configurations, some cancelled mid-way or before they start;
  // greedy ones are checked against the reference. In the end the pool is all free.
  FakeModelOptions o;
  o.eos_bias = 0.5f;
  EngineConfig ec = small_engine(300);
  ec.max_num_seqs = 48;
  ec.max_num_batched_tokens = 160;
  auto t = make_engine(o, ec);
  constexpr int kThreads = 4, kPerThread = 2500, kWave = 50;
  std::atomic<int> finished{0}, cancelled{0}, checked{0}, failures{0};
  auto worker = [&](int w) {
    std::mt19937 rng(100 + static_cast<uint32_t>(w));
    for (int base = 0; base < kPerThread; base += kWave) {
      struct Item {
        GenerateRequest req;
        std::shared_ptr<RequestStream> stream;
        int cancel_after;  // events; -1: never
      };
      std::vector<Item> items;
      for (int i = 0; i < kWave; ++i) {
        Item it;
        it.req.prompt_ids =
            random_prompt(rng, 1 + static_cast<int32_t>(rng() % 40), o.vocab, o.eos);
        GenerateConfig& c = it.req.config;
        c.max_new_tokens = 1 + static_cast<int32_t>(rng() % 24);
        const int kind = static_cast<int>(rng() % 10);
        if (kind < 4) {
          c.temperature = 0.0f;
        } else if (kind < 7) {
          c.random_seed = rng();
          c.top_k = 8;
        } else if (kind < 9) {
          c.num_return_sequences = 2;
          c.random_seed = rng();
        } else {
          c.num_beams = 2;
        }
        const int fate = static_cast<int>(rng() % 10);
        it.cancel_after = fate == 0 ? 0 : fate == 1 ? 1 + static_cast<int>(rng() % 6) : -1;
        it.stream = t.engine->submit(it.req);
        if (it.cancel_after == 0) it.stream->cancel();
        items.push_back(std::move(it));
      }
      for (auto& it : items) {
        GenerateResult r;
        if (it.cancel_after > 0) {
          for (int k = 0; k < it.cancel_after; ++k)
            if (!it.stream->next(std::chrono::seconds(30))) break;
          it.stream->cancel();
        }
        r = it.stream->wait();
        ++finished;
        if (r.error) {
          ++failures;
          ADD_FAILURE() << r.error->message;
        }
        bool was_cancelled = false;
        for (const auto& s : r.sequences)
          was_cancelled |= s.finish_reason == FinishReason::kCancelled;
        cancelled += was_cancelled;
        if (it.cancel_after < 0 && it.req.config.temperature == 0.0f && !r.sequences.empty()) {
          const auto ref = reference_generate(it.req.prompt_ids, it.req.config, o, 0, 0,
                                              *it.req.config.max_new_tokens);
          if (r.sequences[0].output_ids != ref.ids) {
            ++failures;
            ADD_FAILURE() << "greedy output differs from the reference";
          }
          ++checked;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) threads.emplace_back(worker, w);
  for (auto& th : threads) th.join();
  EXPECT_EQ(finished.load(), kThreads * kPerThread);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(cancelled.load(), 500);
  EXPECT_GT(checked.load(), 2000);
  EXPECT_EQ(t.model->violations(), 0);
  const auto s = t.engine->stats();
  EXPECT_EQ(s.num_free_blocks, s.num_kv_blocks);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
  EXPECT_EQ(s.requests_finished, kThreads * kPerThread);
  EXPECT_TRUE(t.engine->healthy());
}

}  // namespace
}  // namespace tachyon
