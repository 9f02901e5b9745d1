// Threads for the request work that is not I/O: parsing bodies, rendering chat
// templates, tokenizing prompts. The HTTP threads hand such work here, so that a slow
// render never holds up /health or other connections.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tachyon::server {

class WorkPool {
 public:
  explicit WorkPool(int threads);
  // Runs what is still queued, then joins the threads.
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues fn; it runs on one of the pool's threads, in the order posted.
  void post(std::function<void()> fn);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tachyon::server
