#include "engine/request_table.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

using Clock = std::chrono::steady_clock;

void RequestTable::add(std::unique_ptr<EngineRequest> r) {
  EngineRequest& req = *r;
  reqs_.emplace(req.id, std::move(r));
  const int64_t seq = new_seq(req, 0, req.prompt);
  req.prompt.clear();
  req.prompt.shrink_to_fit();
  scheduler_->add_group(req.id, seq, req.prompt_len, req.cfg.width(), req.layout, req.cache_salt,
                        req.adapter);
}

EngineRequest* RequestTable::find(int64_t id) {
  auto it = reqs_.find(id);
  return it == reqs_.end() ? nullptr : it->second.get();
}

std::vector<int64_t> RequestTable::ids() const {
  std::vector<int64_t> ids;
  ids.reserve(reqs_.size());
  for (const auto& [id, r] : reqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::unique_ptr<EngineSeq> RequestTable::make_seq(int32_t index, std::vector<int32_t> tokens) {
  auto s = std::make_unique<EngineSeq>();
  s->id = next_seq_id_++;
  s->index = index;
  s->tokens = std::move(tokens);
  seqs_[s->id] = s.get();
  return s;
}

int64_t RequestTable::new_seq(EngineRequest& r, int32_t index, std::vector<int32_t> tokens) {
  auto s = make_seq(index, std::move(tokens));
  if (r.cfg.grammar) {
    if (!r.seqs.empty() && r.seqs[0]->matcher)
      s->matcher = r.seqs[0]->matcher;
    else
      s->matcher.emplace(r.cfg.grammar);
  }
  const int64_t id = s->id;
  r.seqs.push_back(std::move(s));
  return id;
}

std::span<const uint32_t> RequestTable::fill_mask(EngineSeq& s, int32_t vocab_size) {
  try {
    s.mask.resize(static_cast<size_t>(token_mask_words(vocab_size)));
    s.matcher->fill_mask(s.mask);
    return s.mask;
  } catch (const InvalidArgument&) {
    return {};
  }
}

void RequestTable::replace_seqs(EngineRequest& r, std::vector<std::unique_ptr<EngineSeq>> fresh) {
  for (auto& old : r.seqs) {
    scheduler_->remove_seq(old->id);
    seqs_.erase(old->id);
    if (on_seq_end_) on_seq_end_(old->id);
  }
  r.seqs = std::move(fresh);
}

void RequestTable::fail_request(EngineRequest& r, const std::exception& e) {
  const Error* err = dynamic_cast<const Error*>(&e);
  const ErrorInfo info{err ? err->code() : ErrorCode::kInternal, e.what()};
  finish_request(r, FinishReason::kError, &info);
}

void RequestTable::fail_all(ErrorCode code, const std::string& message) {
  const ErrorInfo info{code, message};
  for (int64_t id : ids()) finish_request(*reqs_.at(id), FinishReason::kError, &info);
}

void RequestTable::check_deadlines(Clock::time_point now) {
  std::vector<int64_t> late;
  for (const auto& [id, r] : reqs_)
    if (r->cfg.timeout_ms > 0 && now >= r->deadline) late.push_back(id);
  std::sort(late.begin(), late.end());
  for (int64_t id : late) {
    EngineRequest& r = *reqs_.at(id);
    const ErrorInfo info{ErrorCode::kDeadlineExceeded,
                         fmt::format("the request timed out after {} ms", r.cfg.timeout_ms)};
    finish_request(r, FinishReason::kTimeout, &info);
  }
}

void RequestTable::stop_sequence(int64_t id, int32_t index) {
  EngineRequest* r = find(id);
  if (!r) return;                       // already over
  if (r->cfg.is_beam_search()) return;  // beams end together, by the search
  for (auto& s : r->seqs) {
    if (s->index != index || s->finished) continue;
    finish_seq(*r, *s, FinishReason::kStop, nullptr);
    if (r->outputs_done == r->cfg.num_return_sequences)
      finish_request(*r, FinishReason::kStop, nullptr);
    return;
  }
}

void RequestTable::finish_seq(EngineRequest& r, EngineSeq& s, FinishReason reason,
                              StreamEvent* event) {
  if (s.finished) return;
  StreamEvent local;
  StreamEvent& e = event ? *event : local;
  e.index = s.index;
  e.finish_reason = reason;
  e.cum_log_prob = s.cum_logprob;
  s.drop_pending();  // ended before the tokens in flight (cancelled, failed, timed out)
  s.drop_drafts();   // or before the drafts of a step in flight were verified
  r.timings.output_len += static_cast<int32_t>(s.tokens.size()) - r.prompt_len;
  emit(r, std::move(e));
  s.finished = true;
  if (r.pinned && reason != FinishReason::kError) r.pinned->store(scheduler_->pin_seq(s.id));
  scheduler_->remove_seq(s.id);
  seqs_.erase(s.id);
  if (on_seq_end_) on_seq_end_(s.id);
  ++r.outputs_done;
}

void RequestTable::finish_request(EngineRequest& r, FinishReason reason, const ErrorInfo* error) {
  if (r.cfg.is_beam_search()) {
    if (!r.beam || !r.beam->done()) {
      StreamEvent e;
      e.index = 0;
      e.finish_reason = reason;
      emit(r, std::move(e));
    }
  } else {
    for (auto& s : r.seqs)
      if (!s->finished) finish_seq(r, *s, reason, nullptr);
  }
  scheduler_->remove_group(r.id);  // while the sequences are known (the prefix cache reads them)
  for (auto& s : r.seqs) seqs_.erase(s->id);
  StreamEvent done;
  done.index = -1;
  done.done = true;
  r.timings.total_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - r.submitted).count();
  done.timings = r.timings;
  if (error) done.error = *error;
  emit(r, std::move(done));
  ++requests_finished_;
  --*in_flight_;
  reqs_.erase(r.id);  // r is gone from here on
}

void RequestTable::flush() {
  size_t i = 0;
  while (i < outbox_.size()) {
    std::vector<StreamEvent> batch;
    size_t j = i;
    while (j < outbox_.size() && outbox_[j].first == outbox_[i].first)
      batch.push_back(std::move(outbox_[j++].second));
    outbox_[i].first->push(std::move(batch));
    i = j;
  }
  outbox_.clear();
}

}  // namespace tachyon
