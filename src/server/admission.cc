#include "server/admission.h"

#include <algorithm>

#include "core/logging.h"

namespace tachyon::server {

std::shared_ptr<Admission> Admission::create(int64_t max_running, int64_t max_queued) {
  return std::shared_ptr<Admission>(
      new Admission(std::max<int64_t>(1, max_running), std::max<int64_t>(0, max_queued)));
}

Admission::Result Admission::submit(OnAdmit on_admit, uint64_t* ticket) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ >= max_running_ || !waiting_.empty()) {
      if (static_cast<int64_t>(waiting_.size()) >= max_queued_) return Result::kFull;
      uint64_t t = ++next_ticket_;
      waiting_.emplace_back(t, std::move(on_admit));
      if (ticket) *ticket = t;
      return Result::kQueued;
    }
    ++running_;
  }
  on_admit(std::make_shared<Slot>(shared_from_this()));
  return Result::kAdmitted;
}

bool Admission::withdraw(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(waiting_.begin(), waiting_.end(),
                         [&](const auto& w) { return w.first == ticket; });
  if (it == waiting_.end()) return false;
  waiting_.erase(it);
  return true;
}

void Admission::release() {
  OnAdmit next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiting_.empty()) {
      --running_;
      return;
    }
    next = std::move(waiting_.front().second);
    waiting_.pop_front();  // the slot passes straight to the next waiter
  }
  try {
    next(std::make_shared<Slot>(shared_from_this()));
  } catch (const std::exception& e) {
    log_error("admission: starting a queued request failed: {}", e.what());
  }
}

int64_t Admission::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int64_t Admission::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(waiting_.size());
}

}  // namespace tachyon::server
