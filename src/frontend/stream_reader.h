// Reads engine request streams on pooled threads. A request occupies one reader from
// submission to its last event: the reader blocks on the stream, gathers what arrived
// together into one batch and hands it to the request's sink. Idle readers beyond a
// few exit after a while, so a burst leaves no lasting threads behind.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/request.h"

namespace tachyon {

class StreamReaderPool {
 public:
  using Sink = std::function<void(std::vector<StreamEvent>&&)>;

  explicit StreamReaderPool(int min_idle = 4,
                            std::chrono::milliseconds idle_exit = std::chrono::seconds(10));
  ~StreamReaderPool();  // waits for the streams being read to end
  StreamReaderPool(const StreamReaderPool&) = delete;
  StreamReaderPool& operator=(const StreamReaderPool&) = delete;

  // Reads `stream` until its last event (the sink sees it); then drops the sink.
  void read(std::shared_ptr<RequestStream> stream, Sink sink);

  int threads() const;
  int busy() const;

 private:
  struct Job {
    std::shared_ptr<RequestStream> stream;
    Sink sink;
  };
  void worker();
  void run(Job& job);
  void join_exited_locked(std::vector<std::thread>* out);

  const int min_idle_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  int idle_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread::id> exited_;
};

}  // namespace tachyon
