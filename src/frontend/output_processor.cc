#include "frontend/output_processor.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

OutputProcessor::OutputProcessor(std::shared_ptr<const TextTokenizer> tokenizer,
                                 const GenerateConfig& config, bool skip_special_tokens,
                                 StopSequence stop_sequence)
    : tokenizer_(std::move(tokenizer)),
      skip_special_tokens_(skip_special_tokens),
      beam_(config.is_beam_search()),
      min_new_tokens_(config.min_new_tokens),
      stop_strings_(config.stop_words_str),
      stop_sequence_(std::move(stop_sequence)) {
  if (!stop_strings_.empty() && !tokenizer_)
    raise<InvalidArgument>("generate_config.stop_words_str: needs a tokenizer, and none is loaded");
}

OutputProcessor::SeqState& OutputProcessor::state(int32_t index) {
  TACHYON_CHECK_GE(index, 0);
  while (seqs_.size() <= static_cast<size_t>(index)) {
    SeqState s;
    if (tokenizer_) {
      s.detok = tokenizer_->make_incremental_decoder(skip_special_tokens_);
      s.stop = StopStringMatcher(stop_strings_);
    }
    seqs_.push_back(std::move(s));
  }
  return seqs_[static_cast<size_t>(index)];
}

std::vector<StreamEvent> OutputProcessor::process(std::vector<StreamEvent>&& events) {
  std::vector<StreamEvent> out;
  out.reserve(events.size());
  for (StreamEvent& e : events) {
    if (e.done) {
      last_event(e);
    } else if (e.index >= 0) {
      if (beam_) {
        beam_event(e);
      } else if (!sampled_event(e)) {
        continue;
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

bool OutputProcessor::sampled_event(StreamEvent& e) {
  SeqState& s = state(e.index);
  const size_t n = e.token_ids.size();
  if (s.stopped) {
    s.dropped += static_cast<int32_t>(n);
    return false;
  }
  if (!s.detok) {
    s.generated += static_cast<int32_t>(n);
    return true;
  }
  for (size_t k = 0; k < n; ++k) {
    ++s.generated;
    std::string piece = s.detok->add(e.token_ids[k]);
    // Before min_new_tokens the text cannot stop the sequence: it passes unmatched.
    if (s.generated < min_new_tokens_ || !s.stop.active()) {
      e.text += piece;
      continue;
    }
    StopStringMatcher::Result res = s.stop.push(piece);
    e.text += res.emit;
    if (!res.stopped) continue;
    // Ends here: the tokens after this one (if the event had more) are dropped.
    const size_t keep = k + 1;
    s.dropped += static_cast<int32_t>(n - keep);
    e.token_ids.resize(keep);
    if (e.logprobs.size() > keep) e.logprobs.resize(keep);
    if (e.top_logprobs.size() > keep) e.top_logprobs.resize(keep);
    s.stopped = true;
    const bool engine_ended = e.finish_reason.has_value();
    e.finish_reason = FinishReason::kStop;
    e.stop_string = std::move(res.matched);
    if (!engine_ended && stop_sequence_) stop_sequence_(e.index);
    return true;
  }
  // A sequence that ends normally sends the text held back; one cancelled, timed out or
  // failed does not.
  if (e.finish_reason == FinishReason::kStop || e.finish_reason == FinishReason::kLength) {
    std::string tail = s.detok->flush();
    if (s.stop.active()) {
      StopStringMatcher::Result res = s.stop.push(tail);
      e.text += res.emit;
      if (!res.stopped) e.text += s.stop.flush();
    } else {
      e.text += tail;
    }
  }
  return true;
}

void OutputProcessor::beam_event(StreamEvent& e) const {
  if (!tokenizer_) return;
  auto detok = tokenizer_->make_incremental_decoder(skip_special_tokens_);
  for (int32_t t : e.token_ids) e.text += detok->add(t);
  e.text += detok->flush();
}

void OutputProcessor::last_event(StreamEvent& e) const {
  int32_t dropped = 0;
  for (const SeqState& s : seqs_) dropped += s.dropped;
  e.timings.output_len = std::max(0, e.timings.output_len - dropped);
  // Sequence 0's gaps: one per token after its first, the dropped ones last.
  if (!seqs_.empty()) {
    auto& gaps = e.timings.token_gaps_ms;
    gaps.resize(gaps.size() - std::min(gaps.size(), static_cast<size_t>(seqs_[0].dropped)));
  }
}

}  // namespace tachyon
