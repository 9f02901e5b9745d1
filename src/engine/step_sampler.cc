#include "engine/step_sampler.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/thread_pool.h"
#include "engine/speculation.h"

namespace tachyon {

using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool ends_with(std::span<const int32_t> tokens, size_t from, const std::vector<int32_t>& w) {
  if (tokens.size() < from + w.size()) return false;
  return std::equal(w.begin(), w.end(), tokens.end() - static_cast<ptrdiff_t>(w.size()));
}

}  // namespace

void StepSampler::process(const std::vector<int64_t>& groups, LogitRows& rows, int64_t step_no) {
  // Beams first, one request at a time; sampled requests are gathered into jobs.
  struct Job {
    int64_t request = 0;
    EngineSeq* seq = nullptr;
    StepRow row;
    SampledToken token;
    std::vector<SampledToken> verified;  // a verify step's kept tokens
    std::exception_ptr error;
  };
  std::vector<Job> jobs;
  std::vector<int64_t> sampled;
  for (int64_t g : groups) {
    EngineRequest* found = requests_->find(g);
    if (!found) continue;
    EngineRequest& r = *found;
    try {
      if (r.cfg.is_beam_search()) {
        beam_group(r, rows);
        continue;
      }
      if (!r.forked) {
        // The prompt is done: split it into the request's n sequences, which share its
        // blocks and sample their first tokens from the same logits.
        r.forked = true;
        const int64_t parent = r.seqs[0]->id;
        const StepRow row = rows.at(parent);
        for (int32_t i = 1; i < r.cfg.num_return_sequences; ++i) {
          const int64_t child = requests_->new_seq(r, i, r.seqs[0]->tokens);
          scheduler_->fork_seq(parent, child);
          rows[child] = row;
        }
      }
      for (auto& sp : r.seqs) {
        if (sp->finished) continue;
        auto row = rows.find(sp->id);
        TACHYON_CHECK(row != rows.end(), "no logits for sequence {}", sp->id);
        jobs.push_back({r.id, sp.get(), row->second, {}, {}, nullptr});
      }
      sampled.push_back(r.id);
    } catch (const std::exception& e) {
      requests_->fail_request(r, e);
    }
  }
  // Rows are independent: sample them on the compute pool (idle between forward passes),
  // each worker with its own Sampler. Tokens chosen on the device need no sampling: their
  // jobs are not worth waking the pool for.
  ThreadPool& pool = ThreadPool::global();
  const bool any_host = std::any_of(jobs.begin(), jobs.end(),
                                    [](const Job& j) { return j.row.token == kTokenOnHost; });
  const int64_t workers =
      any_host ? std::min<int64_t>(pool.num_threads(), static_cast<int64_t>(jobs.size()))
               : std::min<int64_t>(1, static_cast<int64_t>(jobs.size()));
  if (static_cast<int64_t>(samplers_.size()) < workers)
    samplers_.resize(static_cast<size_t>(workers));
  auto work = [&](int64_t w) {
    std::vector<uint32_t> mask;  // a constrained row's allowed tokens
    for (size_t j = static_cast<size_t>(w); j < jobs.size(); j += static_cast<size_t>(workers)) {
      Job& job = jobs[j];
      const EngineRequest& r = requests_->at(job.request);
      const EngineSeq& s = *job.seq;
      SamplingContext ctx;
      ctx.config = &r.cfg;
      ctx.tokens = s.tokens;
      ctx.prompt_len = r.prompt_len;
      ctx.eos_ids = eos_ids_;
      ctx.rng =
          RngKey{r.seed, static_cast<uint32_t>(s.index),
                 static_cast<uint64_t>(s.tokens.size() - static_cast<size_t>(r.prompt_len)), 0};
      try {
        if (s.num_drafts > 0) {
          TACHYON_CHECK(job.row.token == kTokenOnHost && job.row.num_rows == s.num_drafts + 1,
                        "sequence {}: {} rows for {} drafts", s.id, job.row.num_rows, s.num_drafts);
          std::vector<const float*> verify_rows;
          for (int32_t i = 0; i < job.row.num_rows; ++i)
            verify_rows.push_back(job.row.logits + static_cast<ptrdiff_t>(i) * vocab_size_);
          VerifyInput in;
          in.config = &r.cfg;
          in.tokens = s.tokens;
          in.prompt_len = r.prompt_len;
          in.num_drafts = s.num_drafts;
          in.rows = verify_rows;
          in.draft_probs = s.draft_probs;
          in.eos_ids = eos_ids_;
          in.seed = r.seed;
          in.seq_index = static_cast<uint32_t>(s.index);
          job.verified = verify_drafts(samplers_[static_cast<size_t>(w)], in, vocab_size_);
        } else if (job.row.token == kTokenOnHost) {
          if (s.matcher) {
            mask.resize(static_cast<size_t>(token_mask_words(vocab_size_)));
            s.matcher->fill_mask(mask);
            ctx.allowed = mask;
          }
          job.token = samplers_[static_cast<size_t>(w)].sample(job.row.logits, vocab_size_, ctx);
        } else if (job.row.token >= 0) {
          job.token.token = job.row.token;  // chosen on the device, with its log-prob
          job.token.sample_logprob = job.row.logprob;
        } else if (job.row.token == kTokenNoneAllowed) {
          raise<InvalidArgument>("no token is allowed: every logit is -inf");
        } else {
          raise<InvalidArgument>("the model produced NaN or infinite logits");
        }
      } catch (...) {
        job.error = std::current_exception();
      }
    }
  };
  if (workers > 1) {
    pool.run(workers, work);
  } else if (workers == 1) {
    work(0);
  }
  // Apply in order; a request that fails stops there.
  for (Job& job : jobs) {
    EngineRequest* r = requests_->find(job.request);
    if (!r) continue;
    try {
      if (job.error) std::rethrow_exception(job.error);
      if (job.seq->num_drafts > 0)
        on_verified(*r, *job.seq, job.verified, step_no);
      else
        on_token(*r, *job.seq, job.token, step_no);
    } catch (const std::exception& e) {
      requests_->fail_request(*r, e);
    }
  }
  for (int64_t id : sampled) {
    EngineRequest* r = requests_->find(id);
    if (r && r->outputs_done == r->cfg.num_return_sequences)
      requests_->finish_request(*r, FinishReason::kStop, nullptr);
  }
}

void StepSampler::on_token(EngineRequest& r, EngineSeq& s, const SampledToken& t, int64_t step_no) {
  const GenerateConfig& cfg = r.cfg;
  const auto now = Clock::now();
  // Where the token goes: its placeholder when the step was queued ahead (the scheduler
  // already counts it), else the end.
  const bool placed = !s.pending.empty() && s.pending.front().step == step_no;
  const size_t pos = placed ? s.pending.front().index : s.tokens.size();
  if (placed) s.pending.erase(s.pending.begin());
  const int32_t before = static_cast<int32_t>(pos) - r.prompt_len;
  if (!r.first_token) {
    r.first_token = true;
    r.timings.first_token_ms = ms_between(r.submitted, now);
  }
  if (s.index == 0 && before > 0) r.timings.token_gaps_ms.push_back(ms_between(s.last_token, now));
  s.last_token = now;
  ++tokens_generated_;

  StreamEvent e;
  e.index = s.index;
  // Ending here: what a step queued after this one computed for it was for nothing.
  auto end = [&](size_t keep) {
    if (step_no >= 0 && s.last_step > step_no) tokens_discarded_ += s.last_step_tokens;
    s.tokens.resize(keep);
    s.pending.clear();
  };
  if (!cfg.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), t.token) != eos_ids_.end()) {
    end(pos);
    e.cum_log_prob = s.cum_logprob;
    return requests_->finish_seq(r, s, FinishReason::kStop, &e);
  }
  // The grammar's matcher advances on the token (its mask allowed it); a text the
  // grammar completes with nothing allowed after it ends the sequence.
  if (s.matcher && !s.matcher->accept_token(t.token))
    raise<Internal>("token {} was chosen outside the grammar's allowed tokens", t.token);
  const bool complete = s.matcher && s.matcher->is_terminated();
  if (placed)
    s.tokens[pos] = t.token;
  else
    s.tokens.push_back(t.token);
  const int32_t generated = before + 1;
  e.token_ids.push_back(t.token);
  if (cfg.return_logprobs) {
    e.logprobs.push_back(t.logprob);
    e.top_logprobs.push_back(t.top);
  }
  s.cum_logprob += t.sample_logprob;
  e.cum_log_prob = s.cum_logprob;
  bool stop = false;
  if (generated >= cfg.min_new_tokens) {
    const size_t from = static_cast<size_t>(r.prompt_len);
    const std::span<const int32_t> so_far(s.tokens.data(), pos + 1);
    for (const auto& w : cfg.stop_words_list) {
      if (ends_with(so_far, from, w)) {
        stop = true;
        break;
      }
    }
  }
  if (stop || complete) {
    end(pos + 1);
    return requests_->finish_seq(r, s, FinishReason::kStop, &e);
  }
  if (generated >= r.max_new_tokens || static_cast<int32_t>(pos) + 1 >= max_seq_len_) {
    end(pos + 1);
    return requests_->finish_seq(r, s, FinishReason::kLength, &e);
  }
  if (!placed) scheduler_->append_token(s.id);
  requests_->emit(r, std::move(e));
}

void StepSampler::on_verified(EngineRequest& r, EngineSeq& s,
                              const std::vector<SampledToken>& tokens, int64_t step_no) {
  const int32_t drafts = s.num_drafts;
  const int32_t accepted = static_cast<int32_t>(tokens.size()) - 1;
  TACHYON_CHECK(accepted >= 0 && accepted <= drafts, "{} tokens kept of {} drafts", tokens.size(),
                drafts);
  ++spec_.drafts;
  spec_.draft_tokens += drafts;
  spec_.accepted_tokens += accepted;
  std::vector<int32_t>& per_pos = r.timings.speculative_accepted_tokens_per_pos;
  if (static_cast<int32_t>(spec_.accepted_per_pos.size()) < drafts)
    spec_.accepted_per_pos.resize(static_cast<size_t>(drafts), 0);
  if (static_cast<int32_t>(per_pos.size()) < drafts) per_pos.resize(static_cast<size_t>(drafts), 0);
  for (int32_t i = 0; i < accepted; ++i) {
    ++spec_.accepted_per_pos[static_cast<size_t>(i)];
    ++per_pos[static_cast<size_t>(i)];
  }
  ++r.timings.speculative_draft_rounds;
  // The drafts leave; those accepted come back as tokens, each taken as a plain step's
  // token is (EOS, stop words and lengths end the sequence there, dropping the rest).
  s.drop_drafts();
  scheduler_->accept_drafts(s.id, accepted);
  for (const SampledToken& t : tokens) {
    on_token(r, s, t, step_no);
    if (s.finished) break;
  }
}

void StepSampler::beam_group(EngineRequest& r, LogitRows& rows) {
  const GenerateConfig& cfg = r.cfg;
  if (!r.beam)
    r.beam = std::make_unique<BeamSearch>(cfg.num_beams, cfg.length_penalty, r.max_new_tokens,
                                          cfg.ignore_eos ? std::vector<int32_t>{} : eos_ids_);
  const size_t nb = r.seqs.size();
  const size_t vocab = static_cast<size_t>(vocab_size_);
  beam_scratch_.resize(nb * vocab);
  std::vector<const float*> lps(nb);
  std::vector<uint32_t> mask;  // a constrained beam's allowed tokens
  std::vector<std::vector<int32_t>> beam_tokens(nb);
  for (size_t b = 0; b < nb; ++b) {
    const EngineSeq& s = *r.seqs[b];
    const float* row = rows.at(s.id).logits;
    TACHYON_CHECK(row != nullptr, "no logits for beam sequence {}", s.id);
    const double lse = log_sum_exp(row, vocab_size_);
    if (!std::isfinite(lse)) raise<InvalidArgument>("the model produced non-finite logits");
    float* lp = beam_scratch_.data() + b * vocab;
    for (size_t v = 0; v < vocab; ++v) lp[v] = static_cast<float>(row[v] - lse);
    // As transformers: the processors act on the log-probabilities.
    SamplingContext ctx;
    ctx.config = &cfg;
    ctx.tokens = s.tokens;
    ctx.prompt_len = r.prompt_len;
    ctx.eos_ids = eos_ids_;
    if (s.matcher) {
      mask.resize(static_cast<size_t>(token_mask_words(vocab_size_)));
      s.matcher->fill_mask(mask);
      ctx.allowed = mask;
    }
    process_logits(lp, vocab_size_, ctx);
    lps[b] = lp;
    beam_tokens[b].assign(s.tokens.begin() + r.prompt_len, s.tokens.end());
  }
  const auto next = r.beam->step(lps, vocab_size_, beam_tokens);
  tokens_generated_ += static_cast<int64_t>(nb);
  if (!r.first_token) {
    r.first_token = true;
    r.timings.first_token_ms = ms_between(r.submitted, Clock::now());
  }
  if (r.beam->done()) {
    const auto& results = r.beam->results();
    const size_t n = std::min(results.size(), static_cast<size_t>(cfg.num_return_sequences));
    for (size_t i = 0; i < n; ++i) {
      const auto& h = results[i];
      StreamEvent e;
      e.index = static_cast<int32_t>(i);
      e.token_ids = h.tokens;
      e.finish_reason = h.ended_with_eos ? FinishReason::kStop : FinishReason::kLength;
      e.cum_log_prob = h.sum_logprobs;
      r.timings.output_len += static_cast<int32_t>(h.tokens.size());
      requests_->emit(r, std::move(e));
    }
    r.outputs_done = static_cast<int32_t>(n);
    return requests_->finish_request(r, FinishReason::kStop, nullptr);
  }
  // The next beams: each forks its parent (sharing its blocks; the shared last block is
  // copied when first written), then the old beams let go of theirs.
  std::vector<std::unique_ptr<EngineSeq>> fresh;
  for (size_t i = 0; i < next.size(); ++i) {
    const EngineSeq& parent = *r.seqs[static_cast<size_t>(next[i].parent)];
    std::vector<int32_t> tokens = parent.tokens;
    tokens.push_back(next[i].token);
    auto child = requests_->make_seq(static_cast<int32_t>(i), std::move(tokens));
    child->cum_logprob = next[i].score;
    child->matcher = parent.matcher;
    if (child->matcher && !child->matcher->accept_token(next[i].token))
      raise<Internal>("beam token {} was chosen outside the grammar's allowed tokens",
                      next[i].token);
    scheduler_->fork_seq(parent.id, child->id);
    scheduler_->append_token(child->id);
    fresh.push_back(std::move(child));
  }
  requests_->replace_seqs(r, std::move(fresh));
}

}  // namespace tachyon
