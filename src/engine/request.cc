#include "engine/request.h"

namespace tachyon {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kTimeout:
      return "timeout";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

std::optional<StreamEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_read_) return std::nullopt;
  ++event_waiters_;
  const bool got = cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  --event_waiters_;
  if (!got) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  if (e.done) {
    done_read_ = true;
    if (result_waiters_ > 0) cv_.notify_all();  // a wait() elsewhere ends with nothing left
  }
  return e;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_read_;
}

GenerateResult RequestStream::wait() {
  // Sleeps until the final event is in (push() wakes a waiter here only for it: a
  // reader of whole results is not woken once per token), then gathers every event.
  std::deque<StreamEvent> events;
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++result_waiters_;
    cv_.wait(lock, [&] { return done_pushed_ || done_read_; });
    --result_waiters_;
    events.swap(events_);
    if (done_pushed_) done_read_ = true;
  }
  GenerateResult result;
  for (StreamEvent& e : events) {
    if (e.index >= 0) {
      if (static_cast<size_t>(e.index) >= result.sequences.size())
        result.sequences.resize(static_cast<size_t>(e.index) + 1);
      SequenceOutput& s = result.sequences[static_cast<size_t>(e.index)];
      s.output_ids.insert(s.output_ids.end(), e.token_ids.begin(), e.token_ids.end());
      s.text += e.text;
      s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      for (auto& t : e.top_logprobs) s.top_logprobs.push_back(std::move(t));
      s.cum_log_prob = e.cum_log_prob;
      if (e.finish_reason) s.finish_reason = *e.finish_reason;
    }
    if (e.done) {
      result.timings = e.timings;
      result.error = e.error;
      break;
    }
  }
  return result;
}

void RequestStream::cancel() {
  if (cancelled_.exchange(true)) return;
  if (on_cancel_) on_cancel_(id_);
}

void RequestStream::stop_sequence(int32_t index) {
  if (on_stop_sequence_) on_stop_sequence_(id_, index);
}

void RequestStream::push(std::vector<StreamEvent> events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_pushed_) return;
    for (auto& e : events) {
      if (done_pushed_) break;
      done_pushed_ = e.done;
      events_.push_back(std::move(e));
    }
    // Only readers that this push can satisfy are woken.
    if (event_waiters_ == 0 && !(done_pushed_ && result_waiters_ > 0)) return;
  }
  cv_.notify_all();
}

}  // namespace tachyon
