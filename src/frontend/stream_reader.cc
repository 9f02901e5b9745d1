#include "frontend/stream_reader.h"

#include <pthread.h>

#include "core/logging.h"

namespace tachyon {

StreamReaderPool::StreamReaderPool(int min_idle, std::chrono::milliseconds idle_exit)
    : min_idle_(min_idle), idle_exit_(idle_exit) {}

StreamReaderPool::~StreamReaderPool() {
  std::map<std::thread::id, std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& [id, t] : threads) t.join();
}

void StreamReaderPool::read(std::shared_ptr<RequestStream> stream, Sink sink) {
  std::vector<std::thread> exited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back({std::move(stream), std::move(sink)});
    if (idle_ < static_cast<int>(jobs_.size())) {
      std::thread t([this] { worker(); });
      auto id = t.get_id();
      threads_.emplace(id, std::move(t));
    }
    join_exited_locked(&exited);
  }
  cv_.notify_one();
  for (auto& t : exited) t.join();
}

void StreamReaderPool::join_exited_locked(std::vector<std::thread>* out) {
  for (auto id : exited_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    out->push_back(std::move(it->second));
    threads_.erase(it);
  }
  exited_.clear();
}

int StreamReaderPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size() - exited_.size());
}

int StreamReaderPool::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void StreamReaderPool::worker() {
  pthread_setname_np(pthread_self(), "stream-reader");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    bool got = cv_.wait_for(lock, idle_exit_, [&] { return stop_ || !jobs_.empty(); });
    --idle_;
    if (!jobs_.empty()) {
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      ++busy_;
      lock.unlock();
      run(job);
      job = Job{};  // release the stream and the sink before counting as idle
      lock.lock();
      --busy_;
      continue;
    }
    if (stop_) return;
    if (!got && idle_ >= min_idle_) {  // idle for a while and enough others wait
      exited_.push_back(std::this_thread::get_id());
      return;
    }
  }
}

void StreamReaderPool::run(Job& job) {
  for (;;) {
    auto first = job.stream->next(std::chrono::milliseconds(500));
    if (!first) {
      if (job.stream->finished()) return;
      continue;
    }
    std::vector<StreamEvent> batch;
    bool done = first->done;
    batch.push_back(std::move(*first));
    while (!done) {  // whatever else already arrived goes in the same batch
      auto more = job.stream->next(std::chrono::milliseconds(0));
      if (!more) break;
      done = more->done;
      batch.push_back(std::move(*more));
    }
    try {
      job.sink(std::move(batch));
    } catch (const std::exception& e) {
      log_error("stream reader: sink failed: {}", e.what());
      job.stream->cancel();
    }
    if (done) return;
  }
}

}  // namespace tachyon
