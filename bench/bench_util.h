// Small helpers shared by the CPU benchmarks: aligned buffers, medians, and a measure
// of how much CPU other processes used while a sample ran (the machine is shared, so
// every reported number says whether it was measured on a quiet machine).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <vector>

namespace tachyon::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct AlignedFree {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
template <typename T>
using AlignedArray = std::unique_ptr<T[], AlignedFree>;

template <typename T>
AlignedArray<T> aligned_array(size_t count) {
  return AlignedArray<T>(
      static_cast<T*>(::operator new[](count * sizeof(T), std::align_val_t(64))));
}

// CPU time (seconds) used by the whole machine and by this process, from /proc.
struct CpuTimes {
  double machine_busy = 0;
  double self = 0;
};

inline CpuTimes read_cpu_times() {
  CpuTimes t;
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (FILE* f = std::fopen("/proc/stat", "r")) {
    unsigned long long user, nice, sys, idle, iowait, irq, softirq, steal;
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle,
                    &iowait, &irq, &softirq, &steal) == 8) {
      t.machine_busy = static_cast<double>(user + nice + sys + irq + softirq + steal) / hz;
    }
    std::fclose(f);
  }
  if (FILE* f = std::fopen("/proc/self/stat", "r")) {
    // Fields 14 and 15 are utime and stime; the command name (field 2) has no spaces here.
    unsigned long long utime = 0, stime = 0;
    if (std::fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                    &stime) == 2) {
      t.self = static_cast<double>(utime + stime) / hz;
    }
    std::fclose(f);
  }
  return t;
}

// Times single calls of fn(i) (i = 0, 1, ...; the first call, a warm-up, is not
// counted) for about `budget_s` seconds and at least `min_calls` calls. The machine is
// shared, so besides the median it reports the 10th percentile and the minimum (what
// the code does when it gets the CPUs; short calls often run undisturbed) and the CPUs
// other processes used meanwhile.
struct Timing {
  double median = 0, p10 = 0, min = 0;  // seconds per call
  double other_cpus = 0;
  int64_t calls = 0;
  bool quiet() const { return other_cpus < 0.15; }
};

inline Timing time_calls(const std::function<void(int64_t)>& fn, double budget_s = 1.0,
                         int64_t min_calls = 5) {
  fn(0);
  std::vector<double> t;
  const CpuTimes c0 = read_cpu_times();
  const auto start = Clock::now();
  for (int64_t i = 1; static_cast<int64_t>(t.size()) < min_calls || seconds_since(start) < budget_s;
       ++i) {
    const auto t0 = Clock::now();
    fn(i);
    t.push_back(seconds_since(t0));
  }
  const double wall = seconds_since(start);
  const CpuTimes c1 = read_cpu_times();
  std::sort(t.begin(), t.end());
  Timing r;
  r.median = t[t.size() / 2];
  r.p10 = t[t.size() / 10];
  r.min = t.front();
  r.calls = static_cast<int64_t>(t.size());
  r.other_cpus = std::max(0.0, ((c1.machine_busy - c0.machine_busy) - (c1.self - c0.self)) / wall);
  return r;
}

// Times fa(i) and fb(i) alternately (same conditions for both); ratio is the median of
// the per-pair ratios time_b / time_a.
struct PairTiming {
  Timing a, b;
  double ratio = 0;
};

inline PairTiming time_pair(const std::function<void(int64_t)>& fa,
                            const std::function<void(int64_t)>& fb, double budget_s = 1.0,
                            int64_t min_calls = 5) {
  fa(0);
  fb(0);
  std::vector<double> ta, tb, ratio;
  const CpuTimes c0 = read_cpu_times();
  const auto start = Clock::now();
  for (int64_t i = 1;
       static_cast<int64_t>(ta.size()) < min_calls || seconds_since(start) < budget_s; ++i) {
    auto t0 = Clock::now();
    fa(i);
    ta.push_back(seconds_since(t0));
    t0 = Clock::now();
    fb(i);
    tb.push_back(seconds_since(t0));
    ratio.push_back(tb.back() / ta.back());
  }
  const double wall = seconds_since(start);
  const CpuTimes c1 = read_cpu_times();
  const double other =
      std::max(0.0, ((c1.machine_busy - c0.machine_busy) - (c1.self - c0.self)) / wall);
  auto summarize = [&](std::vector<double> t) {
    std::sort(t.begin(), t.end());
    Timing r;
    r.median = t[t.size() / 2];
    r.p10 = t[t.size() / 10];
    r.min = t.front();
    r.calls = static_cast<int64_t>(t.size());
    r.other_cpus = other;
    return r;
  };
  PairTiming r{summarize(ta), summarize(tb), median(ratio)};
  return r;
}

}  // namespace tachyon::bench
