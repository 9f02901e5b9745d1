#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/settings.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TACHYON_PAUSE() _mm_pause()
#else
#define TACHYON_PAUSE() std::this_thread::yield()
#endif

namespace tachyon {
namespace {

thread_local bool tl_in_pool_job = false;
int g_requested_threads = 0;
std::once_flag g_pool_once;
std::unique_ptr<ThreadPool> g_pool;

constexpr auto kSpin = std::chrono::microseconds(200);

}  // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& ThreadPool::global() {
  std::call_once(g_pool_once, [] {
    int n = g_requested_threads;
    if (n <= 0) {
      n = static_cast<int>(setting_env_int("threads"));
    }
    if (n <= 0) n = available_cpus();
    g_pool = std::make_unique<ThreadPool>(n);
  });
  return *g_pool;
}

void ThreadPool::set_global_threads(int num_threads) {
  g_requested_threads = num_threads;
}

ThreadPool::ThreadPool(int num_threads) {
  int workers = std::max(0, num_threads - 1);
  workers_.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current_job() {
  const auto& fn = *job_;
  for (;;) {
    int64_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= job_tasks_) break;
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    done_tasks_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop() {
  tl_in_pool_job = true;
  uint64_t seen = 0;
  for (;;) {
    // Spin for a while, then sleep until the generation changes.
    auto spin_until = std::chrono::steady_clock::now() + kSpin;
    while (generation_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < spin_until) {
      TACHYON_PAUSE();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return generation_.load() != seen; });
    seen = generation_.load();
    if (stop_.load()) return;
    // Joining happens under mu_, so the submitter never resets the job's fields while
    // a worker is between reading them and being counted in active_workers_.
    if (job_ == nullptr) continue;
    active_workers_.fetch_add(1, std::memory_order_acq_rel);
    lock.unlock();
    work_on_current_job();
    active_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1 || tl_in_pool_job) {
    for (int64_t i = 0; i < num_tasks; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> submit(submit_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_tasks_ = num_tasks;
    error_ = nullptr;
    next_task_.store(0, std::memory_order_relaxed);
    done_tasks_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  tl_in_pool_job = true;
  work_on_current_job();
  tl_in_pool_job = false;
  while (done_tasks_.load(std::memory_order_acquire) < num_tasks) TACHYON_PAUSE();
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Workers that joined late find no task left; wait until they are out of the job.
    while (active_workers_.load(std::memory_order_acquire) != 0) {
      lock.unlock();
      TACHYON_PAUSE();
      lock.lock();
    }
    job_ = nullptr;
  }
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  int64_t n = end - begin;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  int64_t chunks = std::min<int64_t>(max_chunks, num_threads());
  if (chunks <= 1 || tl_in_pool_job) {
    fn(begin, end);
    return;
  }
  int64_t per = (n + chunks - 1) / chunks;
  run(chunks, [&](int64_t c) {
    int64_t b = begin + c * per;
    int64_t e = std::min(end, b + per);
    if (b < e) fn(b, e);
  });
}

}  // namespace tachyon
