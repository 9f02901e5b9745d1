// Fork-join cost of ThreadPool as a decode step sees it: ~170 parallel calls per token,
// each splitting 50-700 us of work. Reports, per call, the time beyond the ideal
// (work / threads), how long the workers take to join a job, and the cost of the first
// job after the workers went to sleep.
//
//   thread_pool_bench [--threads 2] [--calls 2000]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "core/thread_pool.h"

namespace tachyon::bench {
namespace {

void spin_for(double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
  }
}

struct Stats {
  double min = 0, median = 0, p90 = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v[v.size() * 9 / 10]};
}

// Calls run(tasks) with `work` seconds of busy work in total; returns the overhead
// (wall - work / threads) per call and the delay until the last thread joined.
void overhead(ThreadPool& pool, int tasks, double work, int calls) {
  const int threads = pool.num_threads();
  std::vector<double> over, join;
  std::vector<Clock::time_point> first(static_cast<size_t>(threads));
  for (int c = 0; c < calls; ++c) {
    std::atomic<int> joined{0};
    std::atomic<int64_t> last_join_ns{0};
    const auto t0 = Clock::now();
    pool.run(tasks, [&](int64_t) {
      thread_local int seen_call = -1;
      if (seen_call != c) {
        seen_call = c;
        joined.fetch_add(1);
        const int64_t ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
        int64_t prev = last_join_ns.load();
        while (ns > prev && !last_join_ns.compare_exchange_weak(prev, ns)) {
        }
      }
      spin_for(work / tasks);
    });
    const double wall = seconds_since(t0);
    over.push_back(wall - work / std::min(threads, tasks));
    if (joined.load() == std::min(threads, tasks))
      join.push_back(static_cast<double>(last_join_ns.load()) * 1e-9);
  }
  const Stats o = stats(over);
  std::printf(
      "run(%d tasks, %5.0f us of work): overhead per call min %.2f / median %.2f / p90 %.2f us",
      tasks, work * 1e6, o.min * 1e6, o.median * 1e6, o.p90 * 1e6);
  if (!join.empty()) {
    const Stats j = stats(join);
    std::printf("; all threads joined after median %.2f us (%zu of %d calls had every thread)",
                j.median * 1e6, join.size(), calls);
  }
  std::printf("\n");
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  using namespace tachyon;
  int threads = 2, calls = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
    if (a == "--calls") calls = std::stoi(argv[i + 1]);
  }
  ThreadPool pool(threads);
  const bench::CpuTimes c0 = bench::read_cpu_times();
  const auto t0 = bench::Clock::now();
  std::printf("# thread_pool_bench: %d threads\n", threads);
  for (int tasks : {2, 8}) {
    for (double work : {20e-6, 100e-6, 500e-6}) bench::overhead(pool, tasks, work, calls);
  }
  // After an idle gap the workers sleep; the next job pays their wake-up.
  std::vector<double> wake;
  for (int c = 0; c < 200; ++c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto s = bench::Clock::now();
    pool.run(threads, [](int64_t) { bench::spin_for(50e-6); });
    wake.push_back(bench::seconds_since(s) - 50e-6);
  }
  const bench::Stats w = bench::stats(wake);
  std::printf(
      "first job after 2 ms idle (%d tasks, 50 us each): overhead min %.1f / median %.1f / p90 "
      "%.1f us\n",
      threads, w.min * 1e6, w.median * 1e6, w.p90 * 1e6);
  const bench::CpuTimes c1 = bench::read_cpu_times();
  const double dt = bench::seconds_since(t0);
  std::printf("other processes used %.2f CPUs meanwhile\n",
              ((c1.machine_busy - c0.machine_busy) - (c1.self - c0.self)) / dt);
  return 0;
}
