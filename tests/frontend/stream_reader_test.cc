#include "frontend/stream_reader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>

namespace tachyon {
namespace {

StreamEvent token(int32_t id) {
  StreamEvent e;
  e.token_ids = {id};
  return e;
}

StreamEvent last() {
  StreamEvent e;
  e.index = -1;
  e.done = true;
  return e;
}

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> batches;  // token ids per batch; -1 marks done
  bool done = false;
  void add(std::vector<StreamEvent>&& evs) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int32_t> ids;
    for (auto& e : evs) {
      if (e.done) {
        ids.push_back(-1);
        done = true;
      }
      for (int32_t t : e.token_ids) ids.push_back(t);
    }
    batches.push_back(ids);
    cv.notify_all();
  }
  bool wait_done() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; });
  }
};

TEST(StreamReaderPool, DeliversEverythingInOrderAndBatchesWhatIsWaiting) {
  StreamReaderPool pool;
  auto s = std::make_shared<RequestStream>(1);
  s->push({token(1), token(2), token(3)});  // already there: one batch
  Collected c;
  pool.read(s, [&](std::vector<StreamEvent>&& e) { c.add(std::move(e)); });
  {
    std::unique_lock<std::mutex> lock(c.mu);
    ASSERT_TRUE(c.cv.wait_for(lock, std::chrono::seconds(30), [&] { return !c.batches.empty(); }));
    EXPECT_EQ(c.batches[0], (std::vector<int32_t>{1, 2, 3}));
  }
  s->push({token(4)});
  s->push({last()});
  ASSERT_TRUE(c.wait_done());
  std::vector<int32_t> all;
  for (auto& b : c.batches) all.insert(all.end(), b.begin(), b.end());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 4, -1}));
}

TEST(StreamReaderPool, ManyStreamsAtOnceAndThreadsAreReused) {
  StreamReaderPool pool(/*min_idle=*/2, std::chrono::milliseconds(50));
  constexpr int kStreams = 64;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::unique_ptr<Collected>> out;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_shared<RequestStream>(i));
    out.push_back(std::make_unique<Collected>());
    auto* c = out.back().get();
    pool.read(streams.back(), [c](std::vector<StreamEvent>&& e) { c->add(std::move(e)); });
  }
  EXPECT_LE(pool.threads(), kStreams);
  for (int round = 0; round < 5; ++round)
    for (int i = 0; i < kStreams; ++i) streams[i]->push({token(i * 10 + round)});
  for (auto& s : streams) s->push({last()});
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(out[i]->wait_done());
    std::vector<int32_t> all;
    for (auto& b : out[i]->batches) all.insert(all.end(), b.begin(), b.end());
    std::vector<int32_t> want;
    for (int round = 0; round < 5; ++round) want.push_back(i * 10 + round);
    want.push_back(-1);
    EXPECT_EQ(all, want);
  }
  // Idle readers beyond min_idle go away.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pool.threads() > 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_LE(pool.threads(), 2);
  // And are created again when needed.
  auto s = std::make_shared<RequestStream>(99);
  Collected c;
  pool.read(s, [&](std::vector<StreamEvent>&& e) { c.add(std::move(e)); });
  s->push({token(7), last()});
  EXPECT_TRUE(c.wait_done());
}

}  // namespace
}  // namespace tachyon
