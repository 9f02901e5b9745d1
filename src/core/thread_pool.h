// A fork-join pool for compute kernels. The calling thread works too; workers spin
// briefly between jobs (kernels arrive back to back during a forward pass) and then
// sleep. Nested calls from inside a job run inline on the calling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tachyon {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 means everything runs inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool; its size comes from TACHYON_NUM_THREADS or the number of
  // CPUs available to the process. set_global_threads() before first use changes it.
  static ThreadPool& global();
  static void set_global_threads(int num_threads);

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) for every i in [0, num_tasks); returns when all calls are done.
  // An exception from fn is rethrown here (the first one; the others are dropped).
  void run(int64_t num_tasks, const std::function<void(int64_t)>& fn);

  // Splits [begin, end) into chunks of at least `grain` items, about one or a few per
  // thread, and calls fn(chunk_begin, chunk_end) on each.
  void parallel_for(int64_t begin, int64_t end, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void work_on_current_job();

  std::vector<std::thread> workers_;
  std::mutex submit_mu_;  // one job at a time

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};

  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int64_t> done_tasks_{0};
  std::atomic<int> active_workers_{0};
  std::exception_ptr error_;
  std::mutex error_mu_;
};

// Number of CPUs this process may run on.
int available_cpus();

}  // namespace tachyon
