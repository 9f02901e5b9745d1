#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "core/error.h"

namespace tachyon {
namespace {

TEST(ThreadPool, RunsEveryTaskOnce) {
  ThreadPool pool(4);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::atomic<int>> hits(37);
    pool.run(37, [&](int64_t i) { hits[i].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ParallelForCoversRange) {
  ThreadPool pool(3);
  std::vector<int> v(1000, 0);
  pool.parallel_for(10, 990, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[i] += 1;
  });
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(v[i], (i >= 10 && i < 990) ? 1 : 0) << i;
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.run(4, [&](int64_t) { pool.run(5, [&](int64_t) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 20);
}

TEST(ThreadPool, PropagatesExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(10,
                        [](int64_t i) {
                          if (i == 3) throw InvalidArgument("boom");
                        }),
               InvalidArgument);
  // The pool still works afterwards.
  std::atomic<int> n{0};
  pool.run(10, [&](int64_t) { n++; });
  EXPECT_EQ(n.load(), 10);
}

}  // namespace
}  // namespace tachyon
