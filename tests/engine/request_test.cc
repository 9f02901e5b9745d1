// RequestStream: wait() gathers a request's events whichever thread pushes them and
// however they are split; it ends when the final event arrives, also when another
// reader takes that event through next().
#include "engine/request.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace tachyon {
namespace {

StreamEvent token(int32_t id) {
  StreamEvent e;
  e.token_ids = {id};
  return e;
}

StreamEvent last(FinishReason r = FinishReason::kLength) {
  StreamEvent seq_end;
  seq_end.finish_reason = r;
  return seq_end;
}

StreamEvent done() {
  StreamEvent e;
  e.index = -1;
  e.done = true;
  e.timings.output_len = 7;
  return e;
}

TEST(RequestStream, WaitGathersEventsPushedFromAnotherThread) {
  RequestStream s(1);
  std::thread engine([&] {
    for (int32_t i = 0; i < 200; ++i) {
      s.push({token(i)});
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    s.push({last(), done()});
  });
  const GenerateResult r = s.wait();
  engine.join();
  ASSERT_EQ(r.sequences.size(), 1u);
  ASSERT_EQ(r.sequences[0].output_ids.size(), 200u);
  for (int32_t i = 0; i < 200; ++i) EXPECT_EQ(r.sequences[0].output_ids[i], i);
  EXPECT_EQ(r.sequences[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(r.timings.output_len, 7);
  EXPECT_TRUE(s.finished());
  EXPECT_FALSE(s.next(std::chrono::milliseconds(0)).has_value());
}

TEST(RequestStream, WaitAfterSomeEventsWereReadWithNext) {
  RequestStream s(2);
  s.push({token(1), token(2), token(3)});
  const auto first = s.next(std::chrono::milliseconds(0));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->token_ids, std::vector<int32_t>{1});
  std::thread engine([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.push({token(4)});
    s.push({last(FinishReason::kStop), done()});
    s.push({token(99)});  // after the final event: dropped
  });
  const GenerateResult r = s.wait();
  engine.join();
  ASSERT_EQ(r.sequences.size(), 1u);
  EXPECT_EQ(r.sequences[0].output_ids, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(r.sequences[0].finish_reason, FinishReason::kStop);
}

TEST(RequestStream, WaitEndsWhenAnotherReaderTakesTheFinalEvent) {
  for (int round = 0; round < 20; ++round) {
    RequestStream s(3);
    auto waiter = std::async(std::launch::async, [&] { return s.wait(); });
    auto reader = std::async(std::launch::async, [&] {
      int n = 0;
      while (auto e = s.next(std::chrono::milliseconds(200))) ++n;
      return n;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s.push({token(5)});
    s.push({done()});
    ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    ASSERT_EQ(reader.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    const GenerateResult r = waiter.get();
    const int read = reader.get();
    // Each event went to exactly one of the two readers.
    const size_t gathered = r.sequences.empty() ? 0 : r.sequences[0].output_ids.size();
    EXPECT_LE(gathered + static_cast<size_t>(read), 2u);
    EXPECT_TRUE(s.finished());
  }
}

}  // namespace
}  // namespace tachyon
