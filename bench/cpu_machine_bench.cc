// Measures what bounds the CPU kernels on this machine: memory bandwidth (copy, read,
// write; 1 and N threads) and peak f32 FMA throughput (AVX2 and AVX-512; 1 and N
// threads). Plain timing main; prints medians of repeated runs.
//
//   cpu_machine_bench [--mb 2048] [--threads 2] [--reps 7]
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_kernels.h"

namespace {

using tachyon::bench::fma_chains_avx2;
using tachyon::bench::fma_chains_avx512;
using tachyon::bench::read_sum;

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// Runs fn(t) on `threads` threads (t = 0 on the caller) and returns the wall time of
// the slowest, started together.
double timed_parallel(int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> pool;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      pin_to_cpu(t % static_cast<int>(std::thread::hardware_concurrency()));
      ready.fetch_add(1);
      while (!go.load()) {
      }
      fn(t);
    });
  }
  while (ready.load() != threads - 1) {
  }
  auto t0 = Clock::now();
  go.store(true);
  fn(0);
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

volatile float g_sink;
volatile float g_seed = 1.f;

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 2048;
  int threads = 2, reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb") mb = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
  }
  const size_t bytes = mb << 20;
  const size_t nf = bytes / sizeof(float);
  float* src = static_cast<float*>(std::aligned_alloc(64, bytes));
  float* dst = static_cast<float*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < nf; ++i) src[i] = static_cast<float>(i & 1023);
  std::memset(dst, 0, bytes);
  const bool has512 = __builtin_cpu_supports("avx512f");
  const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");

  std::printf("buffers: 2 x %zu MiB; medians of %d runs\n", mb, reps);
  for (int nt = 1; nt <= threads; nt = nt == threads ? nt + 1 : std::min(nt * 2, threads)) {
    auto slice = [&](int t, size_t& b, size_t& e) {
      size_t per = (nf / nt) & ~size_t(1023);
      b = per * t;
      e = t == nt - 1 ? nf : b + per;
    };
    std::vector<double> copy_t, read_t, write_t;
    for (int r = 0; r < reps; ++r) {
      copy_t.push_back(timed_parallel(nt, [&](int t) {
        size_t b, e;
        slice(t, b, e);
        std::memcpy(dst + b, src + b, (e - b) * sizeof(float));
      }));
      read_t.push_back(timed_parallel(nt, [&](int t) {
        size_t b, e;
        slice(t, b, e);
        g_sink = read_sum(src + b, e - b);
      }));
      write_t.push_back(timed_parallel(nt, [&](int t) {
        size_t b, e;
        slice(t, b, e);
        std::memset(dst + b, r, (e - b) * sizeof(float));
      }));
    }
    double gb = static_cast<double>(bytes) / 1e9;
    std::printf(
        "threads %d: memcpy %.1f GB/s (read+write counted), %.1f GB/s (bytes copied); "
        "read %.1f GB/s; write(memset) %.1f GB/s\n",
        nt, 2 * gb / median(copy_t), gb / median(copy_t), gb / median(read_t),
        gb / median(write_t));
  }
  std::free(src);
  std::free(dst);

  constexpr int kIters = 20'000'000;
  for (int nt = 1; nt <= threads; nt = nt == threads ? nt + 1 : std::min(nt * 2, threads)) {
    if (has512) {
      std::vector<double> ts;
      for (int r = 0; r < 3; ++r)
        ts.push_back(
            timed_parallel(nt, [&](int t) { g_sink = fma_chains_avx512(kIters, g_seed + t); }));
      double flops = 2.0 * 16 * 16 * kIters * nt;
      std::printf("threads %d: AVX-512 f32 FMA peak %.1f GFLOP/s\n", nt, flops / median(ts) / 1e9);
    }
    if (has2) {
      std::vector<double> ts;
      for (int r = 0; r < 3; ++r)
        ts.push_back(
            timed_parallel(nt, [&](int t) { g_sink = fma_chains_avx2(kIters, g_seed + t); }));
      double flops = 2.0 * 8 * 12 * kIters * nt;
      std::printf("threads %d: AVX2 f32 FMA peak %.1f GFLOP/s\n", nt, flops / median(ts) / 1e9);
    }
  }
  return 0;
}
