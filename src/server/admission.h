// Admission control for generation requests: at most max_running at once, at most
// max_queued waiting in FIFO order; beyond that a request is refused at once (429).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace tachyon::server {

class Admission : public std::enable_shared_from_this<Admission> {
 public:
  // A running slot; destroying it admits the next waiter.
  class Slot {
   public:
    explicit Slot(std::shared_ptr<Admission> owner) : owner_(std::move(owner)) {}
    ~Slot() { owner_->release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    std::shared_ptr<Admission> owner_;
  };
  using OnAdmit = std::function<void(std::shared_ptr<Slot>)>;

  static std::shared_ptr<Admission> create(int64_t max_running, int64_t max_queued);

  // Runs on_admit now (in this thread) if a slot is free (kAdmitted); else queues it
  // (kQueued, *ticket set; it runs later on the thread that frees a slot); kFull when
  // the queue is full too (on_admit is dropped).
  enum class Result { kAdmitted, kQueued, kFull };
  Result submit(OnAdmit on_admit, uint64_t* ticket = nullptr);
  // Drops a queued request (its client left). False if it was already admitted.
  bool withdraw(uint64_t ticket);

  int64_t running() const;
  int64_t queued() const;
  int64_t max_running() const { return max_running_; }

 private:
  Admission(int64_t max_running, int64_t max_queued)
      : max_running_(max_running), max_queued_(max_queued) {}
  void release();

  const int64_t max_running_;
  const int64_t max_queued_;
  mutable std::mutex mu_;
  int64_t running_ = 0;
  uint64_t next_ticket_ = 0;
  std::deque<std::pair<uint64_t, OnAdmit>> waiting_;
};

}  // namespace tachyon::server
