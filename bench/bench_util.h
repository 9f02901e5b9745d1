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

// Mean seconds per call of fn over samples of at least `sample_s` seconds, with the
// CPUs other processes used meanwhile. Samples are repeated until `want` of them ran
// with under `quiet_cpus` of other load (or 4 x want were taken); the median of the
// quiet ones is returned, or of all when too few were quiet.
struct Timing {
  double seconds = 0;     // per call
  double other_cpus = 0;  // mean CPUs used by other processes in the kept samples
  int samples = 0;
  bool quiet = false;
};

inline Timing time_calls(const std::function<void(int64_t)>& fn, double sample_s = 0.1,
                         int want = 7, double quiet_cpus = 0.15) {
  // Calibrate the calls per sample (the first call also warms up).
  auto t0 = Clock::now();
  fn(0);
  const double one = std::max(1e-7, seconds_since(t0));
  const int64_t calls = std::max<int64_t>(1, static_cast<int64_t>(sample_s / one));
  std::vector<double> quiet_t, quiet_o, all_t, all_o;
  int64_t next = 1;
  for (int s = 0; s < 4 * want && static_cast<int>(quiet_t.size()) < want; ++s) {
    const CpuTimes c0 = read_cpu_times();
    t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) fn(next++);
    const double dt = seconds_since(t0);
    const CpuTimes c1 = read_cpu_times();
    const double other =
        std::max(0.0, ((c1.machine_busy - c0.machine_busy) - (c1.self - c0.self)) / dt);
    all_t.push_back(dt / static_cast<double>(calls));
    all_o.push_back(other);
    if (other < quiet_cpus) {
      quiet_t.push_back(all_t.back());
      quiet_o.push_back(other);
    }
  }
  Timing r;
  r.quiet = static_cast<int>(quiet_t.size()) >= (want + 1) / 2;
  const auto& ts = r.quiet ? quiet_t : all_t;
  const auto& os = r.quiet ? quiet_o : all_o;
  r.seconds = median(ts);
  r.samples = static_cast<int>(ts.size());
  for (double o : os) r.other_cpus += o / static_cast<double>(os.size());
  return r;
}

}  // namespace tachyon::bench
