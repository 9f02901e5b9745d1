// Admission (admission.cc): requests admitted up to the limit, queued in order, refused
// beyond the queue, also under contention.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/admission.h"

namespace tachyon::server {
namespace {

TEST(Admission, AdmitsQueuesInOrderAndRefusesBeyond) {
  auto adm = Admission::create(2, 2);
  std::vector<std::shared_ptr<Admission::Slot>> slots;
  std::vector<int> order;
  auto take = [&](int id) {
    return [&, id](std::shared_ptr<Admission::Slot> s) {
      order.push_back(id);
      slots.push_back(s);
    };
  };
  EXPECT_EQ(adm->submit(take(1)), Admission::Result::kAdmitted);
  EXPECT_EQ(adm->submit(take(2)), Admission::Result::kAdmitted);
  uint64_t t3 = 0, t4 = 0;
  EXPECT_EQ(adm->submit(take(3), &t3), Admission::Result::kQueued);
  EXPECT_EQ(adm->submit(take(4), &t4), Admission::Result::kQueued);
  EXPECT_EQ(adm->submit(take(5)), Admission::Result::kFull);
  EXPECT_EQ(adm->running(), 2);
  EXPECT_EQ(adm->queued(), 2);
  EXPECT_TRUE(adm->withdraw(t3));
  EXPECT_FALSE(adm->withdraw(t3));
  auto first = std::move(slots[0]);
  slots.erase(slots.begin());
  first.reset();  // request 1 ends: 4 takes its slot
  EXPECT_EQ(order, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(adm->running(), 2);
  EXPECT_EQ(adm->queued(), 0);
  slots.clear();
  EXPECT_EQ(adm->running(), 0);
}

TEST(Admission, NeverExceedsTheLimitUnderContention) {
  auto adm = Admission::create(3, 1000);
  std::atomic<int> inside{0}, peak{0}, done{0};
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::shared_ptr<Admission::Slot>> held;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        adm->submit([&](std::shared_ptr<Admission::Slot> s) {
          int now = ++inside;
          int p = peak.load();
          while (now > p && !peak.compare_exchange_weak(p, now)) {
          }
          --inside;
          ++done;
          s.reset();
        });
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), 1600);
  EXPECT_LE(peak.load(), 3);
  EXPECT_EQ(adm->running(), 0);
}

}  // namespace
}  // namespace tachyon::server
